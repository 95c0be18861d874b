# @summary typhapki on a Kubernetes node: the tool, its node configuration, the fact,
#   the Typha/Felix certificate set and the Typha firewall rule (ferm or nftables).
#
# Declare this class (or `include` it and bind the parameters from hiera); it contains
# its parts in this order:
#
#   typhapki::install -> typhapki::config -> typhapki::fact
#                                         -> typhapki::certs (unless manage_certs is false)
#                                         -> typhapki::ferm  (Typha hosts; manage_ferm)
#                                            or typhapki::nftables (firewall_provider)
#                                         -> typhapki::monitoring (manage_monitoring)
#
# The node configuration file (`config_file`) holds every setting the CLI needs, so the
# module's execs are plain `typhapki issue`, `typhapki check`, `typhapki ferm` (or
# `typhapki nft`), and the
# same commands typed by hand on the node do exactly what Puppet does.
#
# @example A Typha host of the cluster staging-eqiad, certificates from cfssl
#   class { 'typhapki':
#     cluster => 'staging-eqiad',
#     role    => 'both',
#   }
#   # hiera: typhapki::certs::mode: cfssl, typhapki::certs::cfssl_url: https://...
#
# @param role
#   The sets this node holds: Typha hosts `both`, other workers only `felix`.
# @param cluster
#   The node's cluster name in `kubernetes::clusters`. Needed by typhapki::ferm and to
#   take the certificate settings from the cluster's `typha:` mapping.
# @param clusters
#   The fleet's `kubernetes::clusters` (cluster groups of clusters), looked up on the
#   Puppet server. Only this node's cluster is written to the node (`cluster_file`).
# @param clusters_defaults
#   The fleet's `kubernetes::clusters_defaults`, merged under every cluster by the CLI.
# @param manage_package
#   Whether to manage the package (false where the tool comes from elsewhere, e.g. a venv).
# @param package_name
#   The package that installs the `typhapki` command.
# @param package_ensure
#   The package's `ensure` (`installed`, `latest` or a version).
# @param bin
#   The typhapki executable the execs and the fact run.
# @param exec_path
#   The PATH of the execs (restart and reload commands find their tools in it).
# @param config_dir
#   Directory for the node configuration, the cluster data and shipped secrets.
# @param config_file
#   The node configuration file the CLI reads as its defaults ($TYPHAPKI_CONFIG).
# @param cluster_file
#   Where this node's cluster entry of `kubernetes::clusters` is written for `--hiera`.
# @param out
#   The output directory of the set (mounted by hostPath into the pods).
# @param state_dir
#   typhapki's state directory (`--state-dir`); undef: the CLI's default.
# @param manage_fact
#   Whether to install the `typhapki` external fact.
# @param facts_dir
#   The facts.d directory that receives the fact's executable.
# @param manage_certs
#   Whether to keep the certificate set valid (typhapki::certs).
# @param manage_ferm
#   Whether to manage the Typha firewall rule (typhapki::ferm or typhapki::nftables,
#   by `firewall_provider`); default: on Typha hosts (`role` typha or both) of a node
#   with a `cluster`.
# @param firewall_provider
#   The firewall that carries the rule: `ferm` (a file in the directory Debian's ferm.conf includes, reloaded) or `nftables`
#   (named sets included in the fleet's `table inet filter`, refreshed in one
#   transaction without a ruleset reload).
# @param manage_monitoring
#   Whether to set up the metrics timer for node_exporter's textfile collector
#   (typhapki::monitoring).
# @param options
#   More defaults for the node configuration file, by option name (e.g. `timeout`).
#   Values set by the module's own parameters win.
class typhapki (
  Typhapki::Role $role,
  Boolean $manage_package,
  String[1] $package_name,
  String[1] $package_ensure,
  Stdlib::Absolutepath $bin,
  Array[Stdlib::Absolutepath, 1] $exec_path,
  Stdlib::Absolutepath $config_dir,
  Stdlib::Absolutepath $config_file,
  Stdlib::Absolutepath $cluster_file,
  Stdlib::Absolutepath $out,
  Boolean $manage_fact,
  Stdlib::Absolutepath $facts_dir,
  Boolean $manage_certs,
  Boolean $manage_monitoring,
  Typhapki::FirewallProvider $firewall_provider,
  Optional[Pattern[/\A[A-Za-z0-9][A-Za-z0-9._-]*\z/]] $cluster = undef,
  Optional[Hash[String[1], Hash]] $clusters = lookup('kubernetes::clusters', Optional[Hash], undef, undef),
  Optional[Hash] $clusters_defaults = lookup('kubernetes::clusters_defaults', Optional[Hash], undef, undef),
  Optional[Stdlib::Absolutepath] $state_dir = undef,
  Optional[Boolean] $manage_ferm = undef,
  Hash[Pattern[/\A[a-z][a-z0-9_-]*\z/], Data] $options = {},
) {
  $_manage_ferm = $manage_ferm ? {
    undef   => $role != 'felix' and $cluster =~ NotUndef,
    default => $manage_ferm,
  }

  # The node's own cluster entry, found on the server: the node never sees the others.
  if $cluster =~ NotUndef {
    if $clusters =~ Undef {
      fail("typhapki: cluster is '${cluster}' but kubernetes::clusters is not in hiera")
    }
    $groups = $clusters.filter |$group, $members| { $cluster in $members }.keys
    if $groups.length == 0 {
      fail("typhapki: cluster '${cluster}' is not in kubernetes::clusters (groups: ${clusters.keys.join(', ')})")
    }
    if $groups.length > 1 {
      fail("typhapki: cluster '${cluster}' is in more than one group of kubernetes::clusters: ${groups.join(', ')}")
    }
    $cluster_data = {
      'kubernetes::clusters_defaults' => $clusters_defaults.lest || { {} },
      'kubernetes::clusters'          => { $groups[0] => { $cluster => $clusters[$groups[0]][$cluster] } },
    }
    # The cluster's `typha:` mapping, its defaults merged as the CLI merges them (a key
    # of the cluster wins, `~` unsets one), and the hiera key each value is written
    # under: typhapki::certs takes the issuance mode (`signer`) and `cfssl_url` from it
    # unless its own parameters say otherwise, and names the key in a compile error.
    $typha_layers = {
      'kubernetes::clusters_defaults.typha'                 => $clusters_defaults.then |$d| { $d['typha'] },
      "kubernetes::clusters.${groups[0]}.${cluster}.typha" => $clusters[$groups[0]][$cluster].then |$c| {
        $c ? { Hash => $c['typha'], default => undef }
      },
    }.map |$path, $layer| { [$path, $layer ? { Hash => $layer, default => {} }] }.convert_to(Hash)
    $cluster_typha = $typha_layers.reduce({}) |$merged, $layer| { $merged + $layer[1] }
    $cluster_typha_keys = $typha_layers.reduce({}) |$keys, $layer| {
      $keys + $layer[1].keys.map |$key| { [$key, "${layer[0]}.${key}"] }.convert_to(Hash)
    }
    # Each value judged here, at compile time, by the types generated from the CLI's
    # option table and hiera judge (typhapki::typha_types, types/typha/): a value every
    # node would refuse fails this catalog naming its hiera key, and the node keeps
    # running its last good one (its certificates still renew).
    $typha_types = typhapki::typha_types()
    $cluster_typha.each |$key, $value| {
      $type = $typha_types[$key]
      if $type =~ Undef {
        $known = $typha_types.keys.sort.join(', ')
        fail("typhapki: ${cluster_typha_keys[$key]}: unknown key in typha: (known: ${known}; secrets never go into hiera)")
      }
      unless $value =~ Optional[$type] {
        fail("typhapki: ${cluster_typha_keys[$key]}: expected ${type}, got ${String($value, '%p')}")
      }
    }
    unless $cluster_typha =~ Typhapki::Typha {
      $port = "${cluster_typha_keys['port']}: ${cluster_typha['port']} is the TLS Typha's server port"
      $stage = "which tls_stage ${cluster_typha['tls_stage']} opens beside the plain Typha's"
      fail("typhapki: ${port}, ${stage}: give the plain Typha another port")
    }
  } else {
    $cluster_data = undef
    $cluster_typha = {}
    $cluster_typha_keys = {}
  }

  contain typhapki::install
  if $manage_certs {
    contain typhapki::certs
  }
  $firewall_class = $firewall_provider ? {
    'nftables' => 'typhapki::nftables',
    default    => 'typhapki::ferm',
  }
  if $_manage_ferm {
    contain $firewall_class
  }
  if $manage_monitoring {
    contain typhapki::monitoring
  }
  # After certs, ferm and monitoring: the node configuration holds their settings too.
  contain typhapki::config
  if $manage_fact {
    contain typhapki::fact
    Class['typhapki::config'] -> Class['typhapki::fact']
  }

  Class['typhapki::install'] -> Class['typhapki::config']
  if $manage_certs {
    Class['typhapki::config'] -> Class['typhapki::certs']
  }
  if $_manage_ferm {
    Class['typhapki::config'] -> Class[$firewall_class]
  }
  if $manage_monitoring {
    Class['typhapki::config'] -> Class['typhapki::monitoring']
  }
}
