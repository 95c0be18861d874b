# @summary The node configuration file, the node's cluster data and typhapki's directories.
#
# The file holds the defaults of every typhapki command on this node (flags still
# win), built from typhapki, typhapki::certs, typhapki::ferm (or typhapki::nftables) and
# typhapki::monitoring: `typhapki issue`, `check`, `ferm` (`nft`), `facts` and `metrics`
# need no flags, whether Puppet, the metrics timer or an operator runs them.
#
# No parameters of its own: it reads `typhapki::config_dir`, `typhapki::config_file`,
# `typhapki::cluster_file`, `typhapki::out`, `typhapki::role`, `typhapki::cluster`,
# `typhapki::state_dir` and `typhapki::options`, and the node configuration entries of
# `typhapki::certs`, `typhapki::ferm` (or `typhapki::nftables`) and `typhapki::monitoring`.
#
# @api private
class typhapki::config {
  assert_private()

  file { $typhapki::config_dir:
    ensure => directory,
    owner  => 'root',
    group  => 'root',
    mode   => '0755',
  }

  file { $typhapki::out:
    ensure => directory,
    owner  => 'root',
    group  => 'root',
    mode   => '0755',
  }

  if $typhapki::cluster_data =~ NotUndef {
    file { $typhapki::cluster_file:
      ensure  => file,
      owner   => 'root',
      group   => 'root',
      mode    => '0644',
      content => epp('typhapki/cluster.yaml.epp', { 'data' => $typhapki::cluster_data }),
    }
  }

  $node_defaults = {
    'out'       => $typhapki::out,
    'role'      => $typhapki::role,
    'hiera'     => $typhapki::cluster_data ? { undef => undef, default => $typhapki::cluster_file },
    'cluster'   => $typhapki::cluster,
    'state_dir' => $typhapki::state_dir,
  }
  $certs_defaults = $typhapki::manage_certs ? {
    true    => $typhapki::certs::config_defaults,
    default => {},
  }
  $ferm_commands = $typhapki::_manage_ferm ? {
    true    => $typhapki::firewall_provider ? {
      'nftables' => $typhapki::nftables::config_commands,
      default    => $typhapki::ferm::config_commands,
    },
    default => {},
  }
  $defaults = ($typhapki::options + $node_defaults + $certs_defaults).filter |$key, $value| {
    $value =~ NotUndef
  }
  $monitoring_commands = $typhapki::manage_monitoring ? {
    true    => $typhapki::monitoring::config_commands,
    default => {},
  }
  $commands = ($ferm_commands + $monitoring_commands).map |$command, $options| {
    [$command, $options.filter |$key, $value| { $value =~ NotUndef }]
  }.convert_to(Hash).filter |$command, $options| { !$options.empty }

  file { $typhapki::config_file:
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => epp('typhapki/typhapki.yaml.epp', {
        'defaults' => $defaults,
        'commands' => $commands,
    }),
  }
}
