# @summary Mode `shipped` of typhapki::certs: a set issued elsewhere, staged (0700) in the
#   layout `typhapki issue` writes, for `typhapki install --from`.
#
# Declared by typhapki::certs, which orders it before the guarded install. No
# refresh-only exec: the node configuration's `from` lets `typhapki check` judge the
# live set against the staged one, as `install --from` does.
#
# @api private
#
# @param settings
#   The mode's settings (`Typhapki::Certs::Shipped`).
# @param shipped_typha_key
#   Typha's key (PEM), Sensitive: given exactly when `settings` holds `shipped_typha_key`.
# @param shipped_felix_key
#   Felix's key (PEM), Sensitive: given exactly when `settings` holds `shipped_felix_key`.
class typhapki::certs::shipped (
  Typhapki::Certs::Shipped $settings,
  Optional[Sensitive[String[1]]] $shipped_typha_key = undef,
  Optional[Sensitive[String[1]]] $shipped_felix_key = undef,
) {
  $dir = $settings['shipped_dir']

  $config_defaults = { 'from' => $dir }
  $command = shellquote($typhapki::bin, 'install', '--from', $dir)

  $secrets = {
    'shipped_typha_key' => $shipped_typha_key,
    'shipped_felix_key' => $shipped_felix_key,
  }
  $layout = {
    'shipped_bundle'     => ['calico-typha-ca/typhaca.crt', '0644'],
    'shipped_typha_cert' => ['calico-typha-certs/typha.crt', '0644'],
    'shipped_typha_key'  => ['calico-typha-certs/typha.key', '0600'],
    'shipped_felix_cert' => ['calico-node-certs/calico-node.crt', '0644'],
    'shipped_felix_key'  => ['calico-node-certs/calico-node.key', '0600'],
  }.filter |$name, $file| { $name in $settings }
  $subdirs = $layout.map |$name, $file| { "${dir}/${dirname($file[0])}" }.unique
  file { [$dir] + $subdirs:
    ensure => directory,
    owner  => 'root',
    group  => 'root',
    mode   => '0700',
  }
  $layout.each |$name, $file| {
    file { "${dir}/${file[0]}":
      ensure    => file,
      owner     => 'root',
      group     => 'root',
      mode      => $file[1],
      content   => $name in $secrets ? {
        true    => assert_type(Sensitive[String[1]], $secrets[$name]),
        default => $settings[$name],
      },
      show_diff => false,
      backup    => false,
    }
  }
}
