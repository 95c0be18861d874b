# @summary Keeps the node's Typha and/or Felix certificate set valid, in any issuance mode.
#
# One exec makes the set right (`typhapki issue`, or `typhapki install --from DIR` for a
# shipped set), guarded by `typhapki check`: both read the same node configuration
# file, so they judge the set by the same options. A second run changes nothing.
#
# When Typha's files change, the CLI leaves a restart marker (`OUT/.restart-typha`); the
# restart exec runs only while the marker exists, then `typhapki restarted` removes it. So
# Typha (which reads its certificate only at start) is restarted only when its files
# changed, and a failed or refused restart is retried on the next run. Felix re-reads its
# files on every reconnect: no renewal marks it.
#
# A short dispatcher: it builds the mode's settings from its parameters (the hiera keys
# fleets bind) and declares the mode's class, `typhapki::certs::local`,
# `typhapki::certs::shipped` or `typhapki::certs::cfssl`, whose Struct type
# (`Typhapki::Certs::Settings`) refuses a parameter of another mode or one missing for
# the node's role. The secrets travel beside the struct, as Sensitive parameters.
#
# Secrets per mode: `local` ships the cluster CA key to the node; `shipped` ships the
# node's own keys; `cfssl` ships only the cfssl auth keys (the node makes its keys).
# Keys are `Sensitive`: redacted from reports and stored catalogs, never diffed nor
# backed up to the filebucket (but in clear on the node, as they must be).
#
# @example Local CA (lab), CA from the server's secrets (eyaml)
#   typhapki::certs::mode: local
#   typhapki::certs::ca_cert: "%{lookup('secrets::typha_ca_cert')}"
#   typhapki::certs::ca_key: ENC[PKCS7,...]
#
# @param mode
#   How the set is issued: `local`, `shipped` or `cfssl` (Typhapki::Mode); undef (the
#   default): `cfssl` when the cluster's `typha:` mapping says `signer: cfssl`, else
#   `local`.
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
# @param new_ca_cert
#   local: the emergency CA roll's new CA certificate (PEM; docs/rotation.md, "Emergency:
#   the CA key is stolen"), written to `new_ca_dir` with `new_ca_key` and given to
#   `typhapki issue` and `check` as `--new-ca-dir`. The same CA as the cluster's
#   `typha.emergency.new_ca`.
# @param new_ca_key
#   local: the new CA's key (PEM), Sensitive. With `new_ca_cert`.
# @param new_ca_dir
#   local: where the new CA is written on the node.
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
#   cfssl: the cfssl server's URL (`--cfssl-url`); undef: `cfssl_url` of the cluster's
#   `typha:` mapping, which the CLI reads from `cluster_file`. One of the two is required.
# @param cfssl_auth_key
#   cfssl: the hex HMAC key of authsign (`--cfssl-auth-key`), Sensitive.
# @param cfssl_auth_key_typha
#   cfssl: the auth key of Typha's profile, Sensitive, when it differs from
#   `cfssl_auth_key` (node configuration `cfssl_auth_key_typha`).
# @param cfssl_auth_key_felix
#   cfssl: the auth key of Felix's profile, Sensitive (node configuration `cfssl_auth_key_felix`).
# @param cfssl_ca_cert
#   cfssl: the CA certificate(s) (PEM) to trust for TLS to an https cfssl_url
#   (`--cfssl-ca-file`); undef: the system's trust store.
# @param cfssl_client_cert
#   cfssl: this node's certificate for mutual TLS to the PKI's HTTPS front
#   (`--cfssl-client-cert`): `puppet` for the Puppet agent's own certificate and key
#   (the Puppet CA then trusted for the front unless `cfssl_ca_cert` is given; paths
#   from `$trusted['certname']` and `puppet_ssldir`, never the server's `$settings::`),
#   or the path of a certificate on the node with `cfssl_client_key`.
# @param cfssl_client_key
#   cfssl: the path of the key of a `cfssl_client_cert` path (`--cfssl-client-key`).
# @param puppet_ssldir
#   cfssl with `cfssl_client_cert: puppet`: the Puppet agent's ssldir on the node
#   (Debian's `/var/lib/puppet/ssl` in the module's data); the certificate is
#   `certs/CERTNAME.pem` there, by the node's trusted certname.
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
#   Both leaves' lifetime in days (local CA and `sign`); undef: as above. Excludes the
#   per-role lifetimes.
# @param typha_lifetime
#   Typha's leaf lifetime (`28d`), local CA and `sign`; with cfssl the profile's `expiry`
#   decides; undef: as above.
# @param felix_lifetime
#   Felix's leaf lifetime (`24h`), as for `typha_lifetime`; undef: as above.
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
#   Shell command that restarts Typha on this node (`typhapki restart-typha --kubeconfig
#   FILE`: one Typha per cluster at a time, as its PodDisruptionBudget allows); undef: no
#   restart (the marker stays).
# @param restart_felix
#   Shell command that restarts Felix (calico-node) on this node while an
#   `OUT/.restart-felix` an older typhapki left exists; undef (the default): none, Felix
#   re-reads its files on reconnect.
class typhapki::certs (
  Boolean $paused,
  Stdlib::Absolutepath $ca_dir,
  Stdlib::Absolutepath $shipped_dir,
  Array[String[1]] $trust_certs,
  Stdlib::Absolutepath $puppet_ssldir,
  Optional[String[1]] $restart_typha,
  Optional[String[1]] $restart_felix,
  Optional[Typhapki::Mode] $mode = undef,
  Optional[String[1]] $ca_cert = undef,
  Optional[Sensitive[String[1]]] $ca_key = undef,
  Optional[String[1]] $new_ca_cert = undef,
  Optional[Sensitive[String[1]]] $new_ca_key = undef,
  Stdlib::Absolutepath $new_ca_dir = '/etc/typhapki/ca-new',
  Optional[String[1]] $shipped_bundle = undef,
  Optional[String[1]] $shipped_typha_cert = undef,
  Optional[Sensitive[String[1]]] $shipped_typha_key = undef,
  Optional[String[1]] $shipped_felix_cert = undef,
  Optional[Sensitive[String[1]]] $shipped_felix_key = undef,
  Optional[Typhapki::CfsslUrl] $cfssl_url = undef,
  Optional[Sensitive[String[1]]] $cfssl_auth_key = undef,
  Optional[Sensitive[String[1]]] $cfssl_auth_key_typha = undef,
  Optional[Sensitive[String[1]]] $cfssl_auth_key_felix = undef,
  Optional[String[1]] $cfssl_ca_cert = undef,
  Optional[Variant[Enum['puppet'], Stdlib::Absolutepath]] $cfssl_client_cert = undef,
  Optional[Stdlib::Absolutepath] $cfssl_client_key = undef,
  Optional[Typhapki::CfsslName] $cfssl_profile_typha = undef,
  Optional[Typhapki::CfsslName] $cfssl_profile_felix = undef,
  Optional[Typhapki::CfsslName] $cfssl_label = undef,
  Optional[Typhapki::KeyType] $key_type = undef,
  Optional[Integer[1, 36500]] $days = undef,
  Optional[Typhapki::Lifetime] $typha_lifetime = undef,
  Optional[Typhapki::Lifetime] $felix_lifetime = undef,
  Optional[Typhapki::RenewBefore] $renew_before = undef,
  Optional[String[1]] $key_owner = undef,
  Optional[String[1]] $key_group = undef,
  Optional[Typhapki::KeyMode] $key_mode = undef,
) {
  assert_private('declare class typhapki (typhapki::manage_certs) instead of typhapki::certs')

  $role = $typhapki::role
  $config_dir = $typhapki::config_dir

  # What the cluster's typha: mapping holds reaches the node in cluster.yaml, where the
  # CLI reads it: the module only needs the mode and, for the struct, cfssl's URL. Its
  # own parameters win, as flags and the node configuration win over hiera on the node.
  $typha = $typhapki::cluster_typha
  $typha_keys = $typhapki::cluster_typha_keys
  $issuance = $mode.lest || { $typha['signer'] ? { 'cfssl' => 'cfssl', default => 'local' } }
  if $issuance == 'cfssl' and $cfssl_url =~ Undef {
    $mapped_url = $typha['cfssl_url']
    if $mapped_url =~ Undef {
      $in_mapping = $typhapki::cluster ? {
        undef   => '',
        default => "cfssl_url in the typha: mapping of cluster '${typhapki::cluster}' in kubernetes::clusters, or ",
      }
      fail("typhapki::certs: mode cfssl needs cfssl's URL: set ${in_mapping}typhapki::certs::cfssl_url")
    }
    unless $mapped_url =~ Typhapki::CfsslUrl {
      $where = $typha_keys['cfssl_url']
      fail("typhapki::certs: ${where}: expected https://HOST[:PORT] (plain http:// to loopback only), got '${mapped_url}' (or set typhapki::certs::cfssl_url)")
    }
  }

  # The emergency CA roll (docs/rotation.md) signs on the central signer: a shipped
  # set is made there, step by step, never on the node.
  if $issuance == 'shipped' and $typha['emergency'] =~ NotUndef {
    $how = "run the emergency's steps there, on the central signer (typhapki issue --ca-dir/--trust per step, docs/rotation.md)"
    fail("typhapki::certs: ${typha_keys['emergency']}: shipped sets are made on the admin host: ${how}, and ship each step's set")
  }

  $with_typha = $role in ['typha', 'both']
  $with_felix = $role in ['felix', 'both']

  # Every mode's parameter that is set, whatever the mode: the mode class's Struct type
  # (types/certs/) refuses a stray one of another mode and a missing one for the role.
  # A secret appears as `true`; its value travels apart, as a Sensitive parameter.
  $settings = {
    'mode'                 => $issuance,
    'role'                 => $role,
    'ca_dir'               => $issuance ? { 'local' => $ca_dir, default => undef },
    'ca_cert'              => $ca_cert,
    'ca_key'               => $ca_key =~ NotUndef,
    'new_ca_dir'           => ($issuance == 'local' and $new_ca_cert =~ NotUndef) ? { true => $new_ca_dir, default => undef },
    'new_ca_cert'          => $new_ca_cert,
    'new_ca_key'           => $new_ca_key =~ NotUndef,
    'shipped_dir'          => $issuance ? { 'shipped' => $shipped_dir, default => undef },
    'shipped_bundle'       => $shipped_bundle,
    'shipped_typha_cert'   => $shipped_typha_cert,
    'shipped_typha_key'    => $shipped_typha_key =~ NotUndef,
    'shipped_felix_cert'   => $shipped_felix_cert,
    'shipped_felix_key'    => $shipped_felix_key =~ NotUndef,
    'cfssl_url'            => $issuance ? { 'cfssl' => $cfssl_url.lest || { $typha['cfssl_url'] }, default => $cfssl_url },
    'cfssl_auth_key'       => $cfssl_auth_key =~ NotUndef,
    'cfssl_auth_key_typha' => $cfssl_auth_key_typha =~ NotUndef,
    'cfssl_auth_key_felix' => $cfssl_auth_key_felix =~ NotUndef,
    'cfssl_ca_cert'        => $cfssl_ca_cert,
    'cfssl_client_cert'    => $cfssl_client_cert,
    'cfssl_client_key'     => $cfssl_client_key,
    'cfssl_profile_typha'  => $cfssl_profile_typha,
    'cfssl_profile_felix'  => $cfssl_profile_felix,
    'cfssl_label'          => $cfssl_label,
  }.filter |$name, $value| { $value =~ NotUndef and $value != false }
  $secrets = {
    'local'   => { 'ca_key' => $ca_key, 'new_ca_key' => $new_ca_key },
    'shipped' => { 'shipped_typha_key' => $shipped_typha_key, 'shipped_felix_key' => $shipped_felix_key },
    'cfssl'   => {
      'cfssl_auth_key'       => $cfssl_auth_key,
      'cfssl_auth_key_typha' => $cfssl_auth_key_typha,
      'cfssl_auth_key_felix' => $cfssl_auth_key_felix,
    },
  }[$issuance]

  $mode_class = "typhapki::certs::${issuance}"
  class { $mode_class:
    settings => $settings,
    *        => $secrets,
  }
  contain $mode_class

  $trust_files = $trust_certs.map |$index, $pem| { "${config_dir}/trust-${index}.crt" }

  # What typhapki::config writes into the node configuration file's defaults: the mode's
  # own entries, and those of every mode.
  # A local CA overrides a cluster whose mapping names a signer, as on the command line.
  $signer = ($issuance == 'local' and $typha['signer'] =~ NotUndef) ? { true => 'local', default => undef }
  $config_defaults = { 'signer' => $signer } + getvar("${mode_class}::config_defaults") + {
    'trust'          => $trust_files.empty ? { true => undef, default => $trust_files },
    'key_type'       => $key_type,
    'days'           => $days,
    'typha_lifetime' => $typha_lifetime,
    'felix_lifetime' => $felix_lifetime,
    'renew_before'   => $renew_before,
    'key_owner'      => $key_owner,
    'key_group'      => $key_group,
    'key_mode'       => $key_mode,
  }

  $trust_certs.each |$index, $pem| {
    file { $trust_files[$index]:
      ensure  => file,
      owner   => 'root',
      group   => 'root',
      mode    => '0644',
      content => $pem,
    }
  }

  # Paused: no exec changes the set, so nothing is ordered before one.
  unless $paused {
    exec { 'typhapki-issue':
      command     => getvar("${mode_class}::command"),
      unless      => shellquote($typhapki::bin, 'check', '--quiet'),
      path        => $typhapki::exec_path,
      environment => ["TYPHAPKI_CONFIG=${typhapki::config_file}"],
      logoutput   => true,
      require     => [Class[$mode_class]] + $trust_files.map |$file| { File[$file] },
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
