# @summary Installs the typhapki command (a package, unless typhapki::manage_package is false).
#
# No parameters of its own: it reads `typhapki::manage_package`, `typhapki::package_name`
# and `typhapki::package_ensure`.
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
