# @summary Restarts one component while its restart marker says its files changed.
#
# `typhapki issue`, `install` and `rotate-ca` leave `OUT/.restart-COMPONENT` when they
# change a file the component reads. This exec runs the restart command only while the
# marker exists, then `typhapki restarted` removes it; a failed restart leaves the
# marker, so the next run tries again.
#
# @example On a containerd node (the kubelet starts the stopped container again)
#   typhapki::restart { 'typha':
#     command => 'crictl ps --name calico-typha -q | xargs -r crictl stop',
#   }
#
# @example One Typha per cluster at a time, as its PodDisruptionBudget allows
#   typhapki::restart { 'typha':
#     command => '/usr/bin/typhapki restart-typha --kubeconfig /etc/kubernetes/kubelet.conf',
#   }
#
# @param command
#   The shell command that restarts the component on this node.
# @param component
#   typha or felix (default: the title).
define typhapki::restart (
  String[1] $command,
  Typhapki::Component $component = $title,
) {
  include typhapki

  $marker = "${typhapki::out}/.restart-${component}"
  $restarted = shellquote($typhapki::bin, 'restarted', '--component', $component)

  exec { "typhapki-restart-${component}":
    command     => "${command} && ${restarted}",
    onlyif      => shellquote('test', '-e', $marker),
    provider    => shell,
    path        => $typhapki::exec_path,
    environment => ["TYPHAPKI_CONFIG=${typhapki::config_file}"],
    logoutput   => true,
  }
}
