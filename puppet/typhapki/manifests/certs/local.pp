# @summary Mode `local` of typhapki::certs: the cluster CA on the node, from the Puppet
#   server or made by `typhapki ca init`.
#
# Declared by typhapki::certs, which orders it before the guarded `typhapki issue`.
#
# @api private
#
# @param settings
#   The mode's settings (`Typhapki::Certs::Local`).
# @param ca_key
#   The CA key (PEM), Sensitive: given exactly when `settings` holds `ca_key`.
class typhapki::certs::local (
  Typhapki::Certs::Local $settings,
  Optional[Sensitive[String[1]]] $ca_key = undef,
) {
  $ca_dir = $settings['ca_dir']

  # What the dispatcher writes into the node configuration and runs, for this mode.
  $config_defaults = { 'ca_dir' => $ca_dir }
  $command = shellquote($typhapki::bin, 'issue')

  file { $ca_dir:
    ensure => directory,
    owner  => 'root',
    group  => 'root',
    mode   => '0700',
  }
  if 'ca_cert' in $settings {
    file { "${ca_dir}/typhaca.crt":
      ensure  => file,
      owner   => 'root',
      group   => 'root',
      mode    => '0644',
      content => $settings['ca_cert'],
    }
    file { "${ca_dir}/typhaca.key":
      ensure    => file,
      owner     => 'root',
      group     => 'root',
      mode      => '0600',
      content   => assert_type(Sensitive[String[1]], $ca_key),
      show_diff => false,
      backup    => false,
    }
  } else {
    exec { 'typhapki-ca-init':
      command     => shellquote($typhapki::bin, 'ca', 'init', '--ca-dir', $ca_dir),
      creates     => "${ca_dir}/typhaca.crt",
      require     => File[$ca_dir],
      path        => $typhapki::exec_path,
      environment => ["TYPHAPKI_CONFIG=${typhapki::config_file}"],
      logoutput   => true,
    }
  }
}
