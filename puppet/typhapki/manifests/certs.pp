# @summary Keeps the node's Typha and/or Felix certificate set valid, in any issuance mode.
#
# One exec makes the set right (`typhapki issue`, or `typhapki install --from DIR` for a
# shipped set), guarded by `typhapki check`: both read the same node configuration
# file, so they judge the set by the same options. A second run changes nothing.
#
# When a component's files change, the CLI leaves a restart marker (`OUT/.restart-typha`,
# `OUT/.restart-felix`); a restart exec per component runs only while its marker exists,
# then `typhapki restarted` removes it. So Typha (which reads its certificate only at
# start) is restarted only when its files changed, and a failed restart is retried on
# the next run.
#
# Secrets per mode: `local` ships the cluster CA key to the node; `shipped` ships the
# node's own keys; `cfssl` ships only the cfssl auth key (the node makes its keys).
# Keys are `Sensitive`: redacted from reports and stored catalogs, never diffed nor
# backed up to the filebucket (but in clear on the node, as they must be).
#
# @example Local CA (lab), CA from the server's secrets (eyaml)
#   typhapki::certs::mode: local
#   typhapki::certs::ca_cert: "%{lookup('secrets::typha_ca_cert')}"
#   typhapki::certs::ca_key: ENC[PKCS7,...]
#
# @param mode
#   How the set is issued: `local`, `shipped` or `cfssl` (Typhapki::Mode).
# @param paused
#   Stop making the set right (no issue/install exec), e.g. while a CA rotation is run
#   stage by stage with `typhapki rotate-ca`. Restarts still follow their markers.
# @param ca_dir
#   local: the directory of the cluster CA (typhaca.crt, typhaca.key) on the node.
# @param ca_cert
#   local: the CA certificate (PEM). With `ca_key`; neither: `typhapki ca init` makes a
#   CA on the node (a single-node lab only: every node would get its own CA).
# @param ca_key
#   local: the CA key (PEM), Sensitive.
# @param shipped_dir
#   shipped: where the set shipped by Puppet is staged (0700) for `typhapki install --from`.
# @param shipped_bundle
#   shipped: the CA bundle (PEM).
# @param shipped_typha_cert
#   shipped: Typha's certificate (PEM), for roles typha and both.
# @param shipped_typha_key
#   shipped: Typha's key (PEM), Sensitive.
# @param shipped_felix_cert
#   shipped: Felix's certificate (PEM), for roles felix and both.
# @param shipped_felix_key
#   shipped: Felix's key (PEM), Sensitive.
# @param cfssl_url
#   cfssl: the cfssl server's URL (`--cfssl-url`).
# @param cfssl_auth_key
#   cfssl: the hex HMAC key of authsign (`--cfssl-auth-key`), Sensitive.
# @param cfssl_ca_cert
#   cfssl: the CA certificate(s) (PEM) to trust for TLS to an https cfssl_url
#   (`--cfssl-ca-file`); undef: the system's trust store.
# @param cfssl_profile_typha
#   cfssl: the profile for Typha's certificate.
# @param cfssl_profile_felix
#   cfssl: the profile for Felix's certificate.
# @param cfssl_label
#   cfssl: the signer label (multirootca).
# @param trust_certs
#   Extra CA certificates (PEM) kept in the bundle (`--trust`), e.g. during a CA rotation.
# @param key_type
#   Key type of the leaves; undef: the cluster's `typha:` setting or the CLI's default.
# @param days
#   Leaf lifetime in days; undef: as above.
# @param renew_before
#   Renew this long before expiry (`30d`); undef: as above.
# @param key_owner
#   Owner of the key files: `10001` in the module's data, the uid the wiring runs Typha
#   as (`typhapki manifests --typha-uid`); undef (`~`): as above.
# @param key_group
#   Group of the key files: `10001` in the module's data (`--typha-gid`); undef: as above.
# @param key_mode
#   Mode of the key files (`0640`); undef: as above.
# @param restart_typha
#   Shell command that restarts Typha on this node; undef: no restart (the marker stays).
# @param restart_felix
#   Shell command that restarts Felix (calico-node) on this node; undef: no restart.
class typhapki::certs (
  Typhapki::Mode $mode,
  Boolean $paused,
  Stdlib::Absolutepath $ca_dir,
  Stdlib::Absolutepath $shipped_dir,
  Array[String[1]] $trust_certs,
  Optional[String[1]] $restart_typha,
  Optional[String[1]] $restart_felix,
  Optional[String[1]] $ca_cert = undef,
  Optional[Sensitive[String[1]]] $ca_key = undef,
  Optional[String[1]] $shipped_bundle = undef,
  Optional[String[1]] $shipped_typha_cert = undef,
  Optional[Sensitive[String[1]]] $shipped_typha_key = undef,
  Optional[String[1]] $shipped_felix_cert = undef,
  Optional[Sensitive[String[1]]] $shipped_felix_key = undef,
  Optional[Stdlib::HTTPUrl] $cfssl_url = undef,
  Optional[Sensitive[String[1]]] $cfssl_auth_key = undef,
  Optional[String[1]] $cfssl_ca_cert = undef,
  Optional[String[1]] $cfssl_profile_typha = undef,
  Optional[String[1]] $cfssl_profile_felix = undef,
  Optional[String[1]] $cfssl_label = undef,
  Optional[Typhapki::KeyType] $key_type = undef,
  Optional[Integer[1]] $days = undef,
  Optional[Typhapki::RenewBefore] $renew_before = undef,
  Optional[String[1]] $key_owner = undef,
  Optional[String[1]] $key_group = undef,
  Optional[Stdlib::Filemode] $key_mode = undef,
) {
  assert_private('declare class typhapki (typhapki::manage_certs) instead of typhapki::certs')

  $role = $typhapki::role
  $bin = $typhapki::bin
  $config_dir = $typhapki::config_dir
  $with_typha = $role in ['typha', 'both']
  $with_felix = $role in ['felix', 'both']

  # Parameters of another mode are a mistake in hiera: say so instead of ignoring them.
  $by_mode = {
    'local'   => { 'ca_cert' => $ca_cert, 'ca_key' => $ca_key },
    'shipped' => {
      'shipped_bundle'     => $shipped_bundle,
      'shipped_typha_cert' => $shipped_typha_cert,
      'shipped_typha_key'  => $shipped_typha_key,
      'shipped_felix_cert' => $shipped_felix_cert,
      'shipped_felix_key'  => $shipped_felix_key,
    },
    'cfssl'   => {
      'cfssl_url'           => $cfssl_url,
      'cfssl_auth_key'      => $cfssl_auth_key,
      'cfssl_ca_cert'       => $cfssl_ca_cert,
      'cfssl_profile_typha' => $cfssl_profile_typha,
      'cfssl_profile_felix' => $cfssl_profile_felix,
      'cfssl_label'         => $cfssl_label,
    },
  }
  $by_mode.each |$other, $params| {
    if $other != $mode {
      $stray = $params.filter |$name, $value| { $value =~ NotUndef }.keys
      unless $stray.empty {
        fail("typhapki::certs: mode is '${mode}' but ${stray.join(', ')} belong to mode '${other}'")
      }
    }
  }

  case $mode {
    'local': {
      if ($ca_cert =~ Undef) != ($ca_key =~ Undef) {
        fail('typhapki::certs: mode local needs both ca_cert and ca_key, or neither (a CA made on the node)')
      }
    }
    'shipped': {
      $needed = ['shipped_bundle']
        + ($with_typha ? { true => ['shipped_typha_cert', 'shipped_typha_key'], default => [] })
        + ($with_felix ? { true => ['shipped_felix_cert', 'shipped_felix_key'], default => [] })
      $missing = $needed.filter |$name| { $by_mode['shipped'][$name] =~ Undef }
      unless $missing.empty {
        fail("typhapki::certs: mode shipped with role ${role} needs ${missing.join(', ')}")
      }
      $unneeded = $by_mode['shipped'].filter |$name, $value| { $value =~ NotUndef and !($name in $needed) }.keys
      unless $unneeded.empty {
        fail("typhapki::certs: role ${role} holds no ${unneeded.join(', ')}: remove them (keys belong only where they are used)")
      }
    }
    default: {
      if $cfssl_url =~ Undef {
        fail('typhapki::certs: mode cfssl needs cfssl_url')
      }
    }
  }

  $trust_files = $trust_certs.map |$index, $pem| { "${config_dir}/trust-${index}.crt" }
  $cfssl_auth_file = "${config_dir}/cfssl-auth.key"
  $cfssl_ca_file = "${config_dir}/cfssl-ca.crt"

  # What typhapki::config writes into the node configuration file's defaults.
  $config_defaults = {
    'ca_dir'              => $mode ? { 'local' => $ca_dir, default => undef },
    # shipped: `check` judges the live set against the shipped one, as `install --from` does.
    'from'                => $mode ? { 'shipped' => $shipped_dir, default => undef },
    'trust'               => $trust_files.empty ? { true => undef, default => $trust_files },
    'key_type'            => $key_type,
    'days'                => $days,
    'renew_before'        => $renew_before,
    'key_owner'           => $key_owner,
    'key_group'           => $key_group,
    'key_mode'            => $key_mode,
    'signer'              => $mode ? { 'cfssl' => 'cfssl', default => undef },
    'cfssl_url'           => $cfssl_url,
    'cfssl_auth_key'      => $cfssl_auth_key ? { undef => undef, default => $cfssl_auth_file },
    'cfssl_ca_file'       => $cfssl_ca_cert ? { undef => undef, default => $cfssl_ca_file },
    'cfssl_profile_typha' => $cfssl_profile_typha,
    'cfssl_profile_felix' => $cfssl_profile_felix,
    'cfssl_label'         => $cfssl_label,
  }

  # Paused: no exec changes the set, so nothing is ordered before one.
  $before_issue = $paused ? {
    true    => undef,
    default => Exec['typhapki-issue'],
  }

  $exec_defaults = {
    'path'        => $typhapki::exec_path,
    'environment' => ["TYPHAPKI_CONFIG=${typhapki::config_file}"],
    'logoutput'   => true,
  }

  $trust_certs.each |$index, $pem| {
    file { $trust_files[$index]:
      ensure  => file,
      owner   => 'root',
      group   => 'root',
      mode    => '0644',
      content => $pem,
      before  => $before_issue,
    }
  }

  case $mode {
    'local': {
      file { $ca_dir:
        ensure => directory,
        owner  => 'root',
        group  => 'root',
        mode   => '0700',
      }
      if $ca_cert =~ NotUndef {
        file { "${ca_dir}/typhaca.crt":
          ensure  => file,
          owner   => 'root',
          group   => 'root',
          mode    => '0644',
          content => $ca_cert,
          before  => $before_issue,
        }
        file { "${ca_dir}/typhaca.key":
          ensure    => file,
          owner     => 'root',
          group     => 'root',
          mode      => '0600',
          content   => $ca_key,
          show_diff => false,
          backup    => false,
          before    => $before_issue,
        }
      } else {
        exec { 'typhapki-ca-init':
          command => shellquote($bin, 'ca', 'init', '--ca-dir', $ca_dir),
          creates => "${ca_dir}/typhaca.crt",
          require => File[$ca_dir],
          before  => $before_issue,
          *       => $exec_defaults,
        }
      }
      $command = shellquote($bin, 'issue')
    }
    'shipped': {
      $layout = {
        'shipped_bundle'     => ['calico-typha-ca/typhaca.crt', '0644', $shipped_bundle],
        'shipped_typha_cert' => ['calico-typha-certs/typha.crt', '0644', $shipped_typha_cert],
        'shipped_typha_key'  => ['calico-typha-certs/typha.key', '0600', $shipped_typha_key],
        'shipped_felix_cert' => ['calico-node-certs/calico-node.crt', '0644', $shipped_felix_cert],
        'shipped_felix_key'  => ['calico-node-certs/calico-node.key', '0600', $shipped_felix_key],
      }.filter |$name, $file| { $file[2] =~ NotUndef }
      $subdirs = $layout.map |$name, $file| { "${shipped_dir}/${dirname($file[0])}" }.unique
      file { [$shipped_dir] + $subdirs:
        ensure => directory,
        owner  => 'root',
        group  => 'root',
        mode   => '0700',
      }
      $layout.each |$name, $file| {
        file { "${shipped_dir}/${file[0]}":
          ensure    => file,
          owner     => 'root',
          group     => 'root',
          mode      => $file[1],
          content   => $file[2],
          show_diff => false,
          backup    => false,
          before    => $before_issue,
        }
      }
      $command = shellquote($bin, 'install', '--from', $shipped_dir)
    }
    default: {
      if $cfssl_auth_key =~ NotUndef {
        file { $cfssl_auth_file:
          ensure    => file,
          owner     => 'root',
          group     => 'root',
          mode      => '0600',
          content   => $cfssl_auth_key,
          show_diff => false,
          backup    => false,
          before    => $before_issue,
        }
      }
      if $cfssl_ca_cert =~ NotUndef {
        file { $cfssl_ca_file:
          ensure  => file,
          owner   => 'root',
          group   => 'root',
          mode    => '0644',
          content => $cfssl_ca_cert,
          before  => $before_issue,
        }
      }
      $command = shellquote($bin, 'issue')
    }
  }

  unless $paused {
    exec { 'typhapki-issue':
      command => $command,
      unless  => shellquote($bin, 'check', '--quiet'),
      *       => $exec_defaults,
    }
  }

  $restarts = {
    'typha' => $with_typha ? { true => $restart_typha, default => undef },
    'felix' => $with_felix ? { true => $restart_felix, default => undef },
  }
  $restarts.each |$component, $restart| {
    if $restart =~ NotUndef {
      typhapki::restart { $component:
        command => $restart,
      }
      unless $paused {
        Exec['typhapki-issue'] -> Typhapki::Restart[$component]
      }
    }
  }
}
