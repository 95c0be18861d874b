# typhapki on one node, as a Puppet module would run it (docs/puppet.md).
#
# Self-contained: every path lives under the fact `typhapki_root`, so it runs on a test
# host without touching /etc:
#
#   FACTER_typhapki_root=/tmp/node \
#   FACTER_typhapki_hiera=/tmp/hiera/common.yaml FACTER_typhapki_cluster=staging-eqiad \
#   FACTER_typhapki_nameserver=127.0.0.1:5353 \
#   puppet apply --detailed-exitcodes docs/puppet/example.pp
#
# Facts it reads:
#   typhapki_root        (required) the directory everything below lives in
#   typhapki_hiera       hiera file/directory with kubernetes::clusters; with it, the
#   typhapki_cluster     certificate settings come from the cluster's `typha:` mapping
#                        and the Typha ferm rule is managed too
#   typhapki_nameserver  resolver for the ferm DNS gate (IP[:PORT]); default: the system's
#   typhapki_bin         the typhapki executable (default: `typhapki` on the PATH)
#
# Stand-ins for what a real module does differently:
#   ${root}/secrets/typhaca.{crt,key}  the CA as Puppet's secret store would ship it
#                                      (in a real module: secret() / eyaml, see docs)
#   the restart and reload execs       append a line to a log instead of restarting
#                                      the Typha / calico-node pods and reloading ferm

$root = $facts['typhapki_root']
if $root == undef or $root == '' {
  fail('set the typhapki_root fact (FACTER_typhapki_root=DIR)')
}
$typhapki = $facts['typhapki_bin'] ? {
  undef   => 'typhapki',
  ''      => 'typhapki',
  default => $facts['typhapki_bin'],
}
$hiera = $facts['typhapki_hiera']
$cluster = $facts['typhapki_cluster']
$nameserver = $facts['typhapki_nameserver']

$ca_dir = "${root}/etc/typhapki/ca"
$out = "${root}/var/lib/typhapki"            # mounted by hostPath into the pods
$facts_d = "${root}/etc/facter/facts.d"
$ferm_rule = "${root}/etc/ferm/conf.d/10_typha"
$restart_log = "${root}/restarts.log"
$ferm_reload_log = "${root}/ferm-reloads.log"

# Same options for the command and its guard, so they judge the same thing.
$hiera_args = $hiera ? {
  undef   => [],
  ''      => [],
  default => ['--hiera', $hiera, '--cluster', $cluster],
}
$pki_args = shellquote(['--ca-dir', $ca_dir, '--out', $out] + $hiera_args)

file { ["${root}/etc", "${root}/etc/typhapki", "${root}/etc/facter", $facts_d,
        "${root}/var", "${root}/var/lib"]:
  ensure => directory,
  mode   => '0755',
}

# The cluster CA, shipped from the Puppet server. Only the CA key's owner may read it;
# never back it up to the filebucket or show it in a diff.
file { $ca_dir:
  ensure => directory,
  mode   => '0700',
}
file { "${ca_dir}/typhaca.crt":
  ensure  => file,
  mode    => '0644',
  content => file("${root}/secrets/typhaca.crt"),
}
file { "${ca_dir}/typhaca.key":
  ensure    => file,
  mode      => '0600',
  content   => Sensitive(file("${root}/secrets/typhaca.key")),
  show_diff => false,
  backup    => false,
}

# The exec contract: `typhapki check` exits 0 when the set is valid and fresh, so
# `issue` runs only when something must change, and a change notifies the restart.
exec { 'typhapki issue':
  command   => "${typhapki} issue ${pki_args}",
  unless    => "${typhapki} check --quiet ${pki_args}",
  path      => $facts['path'],
  logoutput => true,
  require   => File["${ca_dir}/typhaca.crt", "${ca_dir}/typhaca.key", "${root}/var/lib"],
  notify    => Exec['restart typha and calico-node'],
}

# Typha reads its certificate only at start: restart it (and calico-node) on change.
exec { 'restart typha and calico-node':
  command     => "echo \"restarted \$(date -u +%FT%TZ)\" >> ${shellquote($restart_log)}",
  provider    => shell,
  refreshonly => true,
}

# The external fact, as a facts.d executable: runs on every agent run, never fails it.
$fact_args = $hiera ? {
  undef   => [],
  ''      => [],
  default => $hiera_args + ['--ferm-output', $ferm_rule],
}
file { "${facts_d}/typhapki":
  ensure  => file,
  mode    => '0755',
  content => "#!/bin/sh\nexec ${shellquote([$typhapki, 'facts', '--ca-dir', $ca_dir, '--out', $out] + $fact_args)}\n",
}

# The Typha rule: rendered from the cluster's nodes, only when every one resolves.
if $hiera != undef and $hiera != '' {
  $ns_args = $nameserver ? {
    undef   => [],
    ''      => [],
    default => ['--nameserver', $nameserver],
  }
  $ferm_args = shellquote(['--hiera', $hiera, '--cluster', $cluster, '--output', $ferm_rule]
    + $ns_args)

  file { ["${root}/etc/ferm", "${root}/etc/ferm/conf.d"]:
    ensure => directory,
    mode   => '0755',
  }
  exec { 'typhapki ferm':
    command   => "${typhapki} ferm ${ferm_args}",
    unless    => "${typhapki} ferm ${ferm_args} --check",
    path      => $facts['path'],
    logoutput => true,
    require   => File["${root}/etc/ferm/conf.d"],
    notify    => Exec['reload ferm'],
  }
  exec { 'reload ferm':
    command     => "echo \"reloaded \$(date -u +%FT%TZ)\" >> ${shellquote($ferm_reload_log)}",
    provider    => shell,
    refreshonly => true,
  }
}
