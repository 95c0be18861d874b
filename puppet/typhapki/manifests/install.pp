# @summary Installs the typhapki command (a package, unless typhapki::manage_package is false).
#
# @api private
class typhapki::install {
  assert_private()

  if $typhapki::manage_package {
    package { $typhapki::package_name:
      ensure => $typhapki::package_ensure,
    }
  }
}
