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
# @param new_ca_key
#   The emergency CA roll's new CA key (PEM), Sensitive: given exactly when `settings`
#   holds `new_ca_key`.
class typhapki::certs::local (
  Typhapki::Certs::Local $settings,
  Optional[Sensitive[String[1]]] $ca_key = undef,
  Optional[Sensitive[String[1]]] $new_ca_key = undef,
) {
  $ca_dir = $settings['ca_dir']

  # What the dispatcher writes into the node configuration and runs, for this mode.
  $config_defaults = { 'ca_dir' => $ca_dir, 'new_ca_dir' => $settings['new_ca_dir'] }

  # The emergency CA roll's new CA (docs/rotation.md): `issue --new-ca-dir` signs the
  # roles its step moves.
  if 'new_ca_cert' in $settings {
    $new_ca_dir = $settings['new_ca_dir']
    file { $new_ca_dir:
      ensure => directory,
      owner  => 'root',
      group  => 'root',
      mode   => '0700',
    }
    file { "${new_ca_dir}/typhaca.crt":
      ensure  => file,
      owner   => 'root',
      group   => 'root',
      mode    => '0644',
      content => $settings['new_ca_cert'],
    }
    file { "${new_ca_dir}/typhaca.key":
      ensure    => file,
      owner     => 'root',
      group     => 'root',
      mode      => '0600',
      content   => assert_type(Sensitive[String[1]], $new_ca_key),
      show_diff => false,
      backup    => false,
    }
  }
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
