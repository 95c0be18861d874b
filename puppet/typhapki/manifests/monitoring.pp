# @summary Monitoring on by default: the metrics timer writes into node_exporter's
#   textfile directory, and a marker lets an alert see a node that never wrote.
#
# The Debian package installs `typhapki-metrics.service` and `.timer`
# (contrib/systemd); the service runs `typhapki metrics` with the node configuration
# file and no option of its own, so it reads the set Puppet keeps valid, where Puppet
# keeps it. This class
#
# * puts the textfile directory into the node configuration file (`commands: metrics:
#   textfile_dir`, written by typhapki::config);
# * writes a drop-in for the service naming that file (`TYPHAPKI_CONFIG`) and opening
#   the textfile directory for writing (the service runs with `ProtectSystem=strict`);
# * writes `typhapki-expected.prom` (`typhapki_metrics_expected 1`) into the textfile
#   directory, so TyphapkiMetricsStale fires for a node whose timer never wrote its file
#   (contrib/prometheus/typhapki.rules.yml);
# * enables and starts the timer (manage_timer).
#
# @example Another textfile directory, the timer managed elsewhere
#   # hiera:
#   typhapki::monitoring::textfile_dir: /var/lib/node_exporter/textfile
#   typhapki::monitoring::manage_timer: false
#
# @param textfile_dir
#   node_exporter's `--collector.textfile.directory` (Debian's default:
#   /var/lib/prometheus/node-exporter).
# @param manage_textfile_dir
#   Whether to make sure `textfile_dir` exists (only its existence: owner and mode stay
#   node_exporter's package's). False where another module declares it. Its parent
#   must exist (node_exporter's package makes it): on nodes without node_exporter set
#   `typhapki::manage_monitoring: false`.
# @param manage_timer
#   Whether to enable and start the timer (and reload systemd after the drop-in
#   changes). False where the units do not come from the package.
# @param timer
#   The timer unit.
# @param service
#   The service unit the timer starts, which the drop-in extends.
# @param unit_dir
#   Where the drop-in directory `SERVICE.d` is made.
class typhapki::monitoring (
  Stdlib::Absolutepath $textfile_dir,
  Boolean $manage_textfile_dir,
  Boolean $manage_timer,
  String[1] $timer,
  String[1] $service,
  Stdlib::Absolutepath $unit_dir,
) {
  assert_private('declare class typhapki (typhapki::manage_monitoring) instead of typhapki::monitoring')

  # What typhapki::config writes into the node configuration file, per command.
  $config_commands = {
    'metrics' => { 'textfile_dir' => $textfile_dir },
  }

  if $manage_textfile_dir {
    # prometheus-node-exporter makes both; on a node the module reaches first, it does.
    ensure_resource('file', [dirname($textfile_dir), $textfile_dir], { 'ensure' => 'directory' })
  }

  file { "${textfile_dir}/typhapki-expected.prom":
    ensure => file,
    owner  => 'root',
    group  => 'root',
    mode   => '0644',
    source => 'puppet:///modules/typhapki/typhapki-expected.prom',
  }

  file { "${unit_dir}/${service}.d":
    ensure => directory,
    owner  => 'root',
    group  => 'root',
    mode   => '0755',
  }
  file { "${unit_dir}/${service}.d/typhapki.conf":
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => epp('typhapki/metrics-dropin.conf.epp', {
        'config_file'  => $typhapki::config_file,
        'textfile_dir' => $textfile_dir,
    }),
  }

  if $manage_timer {
    exec { 'typhapki-metrics-daemon-reload':
      command     => 'systemctl daemon-reload',
      path        => $typhapki::exec_path,
      refreshonly => true,
      subscribe   => File["${unit_dir}/${service}.d/typhapki.conf"],
    }
    service { $timer:
      ensure  => running,
      enable  => true,
      require => Exec['typhapki-metrics-daemon-reload'],
    }
  }
}
