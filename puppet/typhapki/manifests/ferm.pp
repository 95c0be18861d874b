# @summary The Typha ferm rule of the node's cluster, rendered only when the DNS gate passes.
#
# The cluster's entry of `kubernetes::clusters` is looked up on the Puppet server and
# written to the node (typhapki::cluster_file) by typhapki::config; `typhapki ferm`
# reads it from there (`--hiera`), with every other option from the node configuration
# file. The exec is guarded by `typhapki ferm --check`.
#
# The reload follows the kernel, not the exec: it runs whenever the Typha rules ferm
# loads from `ferm.conf` differ from the kernel's (`unless => typhapki ferm --kernel`),
# so a rule file written by hand (docs/puppet.md's staging step), or a reload that
# failed once, is loaded on the next run. After the reload, `--kernel` asks again: a
# reload that leaves the kernel stale fails the resource (docs/ferm.md).
#
# When a cluster node does not resolve (dns_gate enforce), `typhapki ferm` exits 1
# naming it and writes nothing: the resource fails, the run reports it, and the last
# good rule stays in place byte for byte.
#
# The rule follows the live switch's stage, the cluster's hiera `typha: tls_stage`, which
# reaches the node in the cluster file (one place: the module passes no stage of its
# own). Without a stage the rule opens the plain Typha's port (`port`); at `parallel`
# and `switch` it opens that port and the TLS Typha's (5474) too, both strict whatever
# `mode` says; at `retire` only the TLS Typha's, strict or relaxed. The plain port
# closes only when hiera says retire.
#
# @example Open the TLS Typha's port beside the plain one, then close the plain one
#   # hiera, the cluster's entry in kubernetes::clusters (`typhapki fleet gate` checks
#   # each move before it is merged):
#   typha:
#     tls_stage: parallel   # later switch, then retire
#
# @example Stage the move from the per-host rule to the relaxed rule, one cluster at a time
#   # hiera, at the level of the cluster being moved:
#   typhapki::ferm::mode: relaxed
#
# @param output
#   The rule file ferm includes (`--output`).
# @param reload_command
#   Shell command that makes ferm load the new rule.
# @param manage_output_dir
#   Whether to create the directory of `output` (false where the ferm module owns it).
# @param mode
#   strict (every node address) or relaxed (the networks); undef: the cluster's
#   `typha: mode` or the CLI's default.
# @param style
#   plain or function; undef: as above.
# @param dns_gate
#   enforce or warn (`--dns-gate`); undef: the CLI's default (enforce).
# @param port
#   The plain Typha's port; undef: the CLI's default (5473). The TLS Typha's port of
#   the live switch is typhapki's own (5474).
# @param nameservers
#   Resolvers for the DNS gate (`--nameserver`); empty: /etc/resolv.conf.
# @param timeout
#   Seconds per DNS query; undef: the CLI's default.
# @param ferm_conf
#   The ferm.conf the reload loads (`--ferm-conf`): what `--kernel` expands and compares
#   with the kernel; undef: the CLI's default (/etc/ferm/ferm.conf).
class typhapki::ferm (
  Stdlib::Absolutepath $output,
  String[1] $reload_command,
  Boolean $manage_output_dir,
  Array[Typhapki::Nameserver] $nameservers,
  Optional[Typhapki::FermMode] $mode = undef,
  Optional[Typhapki::FermStyle] $style = undef,
  Optional[Typhapki::DnsGate] $dns_gate = undef,
  Optional[Stdlib::Port] $port = undef,
  Optional[Numeric] $timeout = undef,
  Optional[Stdlib::Absolutepath] $ferm_conf = undef,
) {
  assert_private('declare class typhapki (typhapki::manage_ferm) instead of typhapki::ferm')

  if $typhapki::role == 'felix' {
    fail('typhapki::ferm protects the port of Typha: manage it on Typha hosts (role typha or both), not with role felix')
  }
  if $typhapki::cluster =~ Undef {
    fail('typhapki::ferm needs typhapki::cluster: the rule lists the nodes of that cluster')
  }

  # What typhapki::config writes into the node configuration file, per command.
  $config_commands = {
    'ferm'  => {
      'output'     => $output,
      'mode'       => $mode,
      'style'      => $style,
      'dns_gate'   => $dns_gate,
      'port'       => $port,
      'nameserver' => $nameservers.empty ? { true => undef, default => $nameservers },
      'timeout'    => $timeout,
      'ferm_conf'  => $ferm_conf,
    },
    'facts' => { 'ferm_output' => $output },
  }

  if $manage_output_dir {
    file { dirname($output):
      ensure => directory,
      owner  => 'root',
      group  => 'root',
      mode   => '0755',
      before => Exec['typhapki-ferm'],
    }
  }

  $bin = $typhapki::bin
  $environment = ["TYPHAPKI_CONFIG=${typhapki::config_file}"]
  exec { 'typhapki-ferm':
    command     => shellquote($bin, 'ferm'),
    unless      => shellquote($bin, 'ferm', '--check'),
    path        => $typhapki::exec_path,
    environment => $environment,
    logoutput   => true,
  }

  # Not refreshonly: every run asks whether the kernel holds the file.
  $kernel = shellquote($bin, 'ferm', '--kernel')
  exec { 'typhapki-ferm-reload':
    command     => "${reload_command} && ${kernel}",
    unless      => $kernel,
    provider    => shell,
    path        => $typhapki::exec_path,
    environment => $environment,
    logoutput   => true,
    require     => Exec['typhapki-ferm'],
  }
}
