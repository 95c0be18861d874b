# @summary Mode `cfssl` of typhapki::certs: the node makes its keys and a cfssl server
#   signs them; the auth keys are 0600 files beside the node configuration.
#
# Declared by typhapki::certs, which orders it before the guarded `typhapki issue`.
#
# @api private
#
# @param settings
#   The mode's settings (`Typhapki::Certs::Cfssl`).
# @param cfssl_auth_key
#   The hex HMAC key of authsign, Sensitive: given exactly when `settings` holds
#   `cfssl_auth_key`.
# @param cfssl_auth_key_typha
#   The auth key of Typha's profile, Sensitive: given exactly when `settings` holds
#   `cfssl_auth_key_typha`.
# @param cfssl_auth_key_felix
#   The auth key of Felix's profile, Sensitive: given exactly when `settings` holds
#   `cfssl_auth_key_felix`.
class typhapki::certs::cfssl (
  Typhapki::Certs::Cfssl $settings,
  Optional[Sensitive[String[1]]] $cfssl_auth_key = undef,
  Optional[Sensitive[String[1]]] $cfssl_auth_key_typha = undef,
  Optional[Sensitive[String[1]]] $cfssl_auth_key_felix = undef,
) {
  $config_dir = $typhapki::config_dir
  $command = shellquote($typhapki::bin, 'issue')

  # Every role needs an auth key (Typhapki::Certs::CfsslAuth, generated from the CLI's
  # option table): without one the node would ask cfssl's unauthenticated /sign, which
  # multirootca does not serve, and fail only at its next renewal.
  $auth = $settings.filter |$name, $value| { $name == 'role' or $name =~ /\Acfssl_auth_key/ }
  unless $auth =~ Typhapki::Certs::CfsslAuth {
    $roles = $settings['role'] ? { 'both' => ['typha', 'felix'], default => [$settings['role']] }
    $missing = $roles.filter |$r| { !("cfssl_auth_key_${r}" in $settings) }
    $keys = $missing.map |$r| { "typhapki::certs::cfssl_auth_key_${r}" }.join(' and ')
    $why = "without one the node asks cfssl's unauthenticated /sign, which multirootca does not serve"
    $set = "set typhapki::certs::cfssl_auth_key (both profiles) or ${keys} (Sensitive, in the private hiera)"
    fail("typhapki::certs: mode cfssl: no cfssl auth key for ${missing.join(' and ')} (role ${settings['role']}): ${set}; ${why}")
  }

  # The node configuration names files, never a secret's value.
  $auth_files = {
    'cfssl_auth_key'       => [$cfssl_auth_key, "${config_dir}/cfssl-auth.key"],
    'cfssl_auth_key_typha' => [$cfssl_auth_key_typha, "${config_dir}/cfssl-auth-typha.key"],
    'cfssl_auth_key_felix' => [$cfssl_auth_key_felix, "${config_dir}/cfssl-auth-felix.key"],
  }.filter |$name, $file| { $name in $settings }
  $ca_file = "${config_dir}/cfssl-ca.crt"

  # The node's identity at the PKI front. `puppet` is resolved here into plain paths,
  # so the CLI reads no puppet.conf on a managed node. Not from `$settings::hostcert`:
  # in agent mode `$settings::` are the server's settings, not the node's. The
  # certname is `$trusted['certname']` (the certificate the server verified), the
  # ssldir `typhapki::certs::puppet_ssldir` (Debian's /var/lib/puppet/ssl by default:
  # no fact reports the agent's ssldir). Under `puppet apply` all of these are the node's.
  $client_cert = $settings['cfssl_client_cert']
  if ($client_cert =~ Stdlib::Absolutepath) != ('cfssl_client_key' in $settings) {
    fail('typhapki::certs: cfssl_client_key goes with a cfssl_client_cert path (not with puppet)')
  }
  $client = $client_cert ? {
    undef    => {},
    'puppet' => $typhapki::certs::puppet_ssldir.then |$ssldir| {
      {
        'cfssl_client_cert' => "${ssldir}/certs/${trusted['certname']}.pem",
        'cfssl_client_key'  => "${ssldir}/private_keys/${trusted['certname']}.pem",
        'cfssl_ca_file'     => $settings['cfssl_ca_cert'].then |$pem| { $ca_file }.lest || {
          "${ssldir}/certs/ca.pem"
        },
      }
    },
    default  => {
      'cfssl_client_cert' => $client_cert,
      'cfssl_client_key'  => $settings['cfssl_client_key'],
    },
  }

  $config_defaults = {
    'signer'              => 'cfssl',
    # The parameter only: a URL from the cluster's mapping reaches the CLI in cluster.yaml,
    # so an error there names the hiera key that holds it.
    'cfssl_url'           => getvar('typhapki::certs::cfssl_url'),
    'cfssl_ca_file'       => $settings['cfssl_ca_cert'].then |$pem| { $ca_file },
    'cfssl_profile_typha' => $settings['cfssl_profile_typha'],
    'cfssl_profile_felix' => $settings['cfssl_profile_felix'],
    'cfssl_label'         => $settings['cfssl_label'],
  } + $auth_files.map |$name, $file| { [$name, $file[1]] }.convert_to(Hash) + $client

  $auth_files.each |$name, $file| {
    file { $file[1]:
      ensure    => file,
      owner     => 'root',
      group     => 'root',
      mode      => '0600',
      content   => assert_type(Sensitive[String[1]], $file[0]),
      show_diff => false,
      backup    => false,
    }
  }
  if 'cfssl_ca_cert' in $settings {
    file { $ca_file:
      ensure  => file,
      owner   => 'root',
      group   => 'root',
      mode    => '0644',
      content => $settings['cfssl_ca_cert'],
    }
  }
}
