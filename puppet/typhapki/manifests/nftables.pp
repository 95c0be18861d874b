# @summary The Typha rule of the node's cluster for nftables, rendered only when the DNS
#   gate passes; the live sets are refreshed without reloading the ruleset.
#
# `typhapki nft` writes `output`: three named sets (`calico_typha_v4`, `calico_typha_v6`
# and the ports, `calico_typha_ports`) and the accept rules, which the fleet's ruleset
# includes inside its own `table inet filter`, after its `chain input`
# (docs/nftables.md). An accept in a base chain of typhapki's own would not override the
# fleet's drop, so the module never loads a table of its own.
#
# The exec is guarded by `typhapki nft --check`. Whenever the loaded sets differ from
# the file's (`unless => typhapki nft --kernel`: a file written by hand, a refresh that
# failed once), they are refreshed in one transaction (`typhapki nft --sets-only` into `sets_output`, then
# `nft -f`): the ruleset is not reloaded, and connections from nodes that stay allowed
# are never refused. Sets not loaded yet are left to the fleet's next ruleset load,
# which reads the file. After the refresh, `--kernel` asks again: a refresh that leaves
# the sets stale fails the resource, and the next run retries it.
#
# The ports follow the live switch's stage, the cluster's hiera `typha: tls_stage`, read
# from the cluster file (the module passes no stage of its own): the plain Typha's
# port (`port`) without a stage, it and the TLS Typha's (5474) at `parallel` and
# `switch` (both strict), the TLS Typha's alone at `retire`. A stage change is a set
# update like a node change: the plain port closes, live, only when hiera says retire.
#
# When a cluster node does not resolve (dns_gate enforce), `typhapki nft` exits 1
# naming it and writes nothing: the resource fails, the run reports it, and the last
# good file and the live sets stay as they were.
#
# A node moved from ferm (firewall_provider) loses the ferm rule typhapki::ferm wrote
# (`typhapki::ferm::output`), and ferm, where it is still installed, is reloaded once
# without it. The reverse move leaves this class's file: the fleet's ruleset names it
# in an `include`, which must go first (docs/nftables.md).
#
# @example Move a Typha host from ferm to nftables
#   # hiera, at the level of the hosts being moved:
#   typhapki::firewall_provider: nftables
#   typhapki::nftables::output: /etc/nftables.d/calico-typha.nft
#
# @param output
#   The file the fleet's ruleset includes inside `table inet filter` (`--output`).
# @param sets_output
#   Where the set update (`--sets-only`) is written before `nft -f` applies it.
# @param nft
#   The nft executable that applies the set update.
# @param manage_output_dir
#   Whether to create the directory of `output` (false where the nftables module owns it).
# @param mode
#   strict (every node address) or relaxed (the networks); undef: the cluster's
#   `typha: mode` or the CLI's default.
# @param dns_gate
#   enforce or warn (`--dns-gate`); undef: the CLI's default (enforce).
# @param port
#   The plain Typha's port; undef: the CLI's default (5473). The TLS Typha's port of
#   the live switch is typhapki's own (5474).
# @param nameservers
#   Resolvers for the DNS gate (`--nameserver`); empty: /etc/resolv.conf.
# @param timeout
#   Seconds per DNS query; undef: the CLI's default.
class typhapki::nftables (
  Stdlib::Absolutepath $output,
  Stdlib::Absolutepath $sets_output,
  Stdlib::Absolutepath $nft,
  Boolean $manage_output_dir,
  Array[Typhapki::Nameserver] $nameservers,
  Optional[Typhapki::FermMode] $mode = undef,
  Optional[Typhapki::DnsGate] $dns_gate = undef,
  Optional[Stdlib::Port] $port = undef,
  Optional[Numeric] $timeout = undef,
) {
  assert_private('declare class typhapki (typhapki::firewall_provider: nftables) instead of typhapki::nftables')

  if $typhapki::role == 'felix' {
    fail('typhapki::nftables protects the port of Typha: manage it on Typha hosts (role typha or both), not with role felix')
  }
  if $typhapki::cluster =~ Undef {
    fail('typhapki::nftables needs typhapki::cluster: the rule lists the nodes of that cluster')
  }

  # What typhapki::config writes into the node configuration file, per command.
  $config_commands = {
    'nft'   => {
      'output'     => $output,
      'mode'       => $mode,
      'dns_gate'   => $dns_gate,
      'port'       => $port,
      'nameserver' => $nameservers.empty ? { true => undef, default => $nameservers },
      'timeout'    => $timeout,
    },
    'facts' => { 'ferm_output' => $output },
  }

  if $manage_output_dir {
    file { dirname($output):
      ensure => directory,
      owner  => 'root',
      group  => 'root',
      mode   => '0755',
      before => Exec['typhapki-nft'],
    }
  }

  $ferm_output = lookup('typhapki::ferm::output', Stdlib::Absolutepath)
  if $ferm_output != $output {
    file { $ferm_output:
      ensure => absent,
      backup => false,
      notify => Exec['typhapki-ferm-retired'],
    }
    exec { 'typhapki-ferm-retired':
      command     => lookup('typhapki::ferm::reload_command', String[1]),
      onlyif      => 'command -v ferm',
      refreshonly => true,
      provider    => shell,
      path        => $typhapki::exec_path,
      logoutput   => true,
    }
  }

  $bin = $typhapki::bin
  $environment = ["TYPHAPKI_CONFIG=${typhapki::config_file}"]
  exec { 'typhapki-nft':
    command     => shellquote($bin, 'nft'),
    unless      => shellquote($bin, 'nft', '--check'),
    path        => $typhapki::exec_path,
    environment => $environment,
    logoutput   => true,
  }

  # The same gate again, then one nft transaction: flush set + add element. Sets that
  # are not live yet (the fleet's ruleset has not loaded the file) get their elements
  # from the file at that load: nothing to refresh before.
  $sets = shellquote($bin, 'nft', '--sets-only', '--output', $sets_output)
  $live = shellquote($nft, 'list', 'set', 'inet', 'filter', 'calico_typha_v4')
  # Not `$apply`: puppet-strings (4.x, trixie's) parses `apply` as a keyword.
  $load = shellquote($nft, '-f', $sets_output)
  $not_live = shellquote('echo', "typhapki: the sets are not loaded yet (no ruleset includes ${output}): nothing to refresh")
  # Not refreshonly: every run asks whether the kernel holds the file's sets.
  $kernel = shellquote($bin, 'nft', '--kernel')
  exec { 'typhapki-nft-sets':
    command     => "${sets} && if ${live} >/dev/null 2>&1; then ${load} && ${kernel}; else ${not_live}; fi",
    unless      => $kernel,
    provider    => shell,
    path        => $typhapki::exec_path,
    environment => $environment,
    logoutput   => true,
    require     => Exec['typhapki-nft'],
  }
}
