# @summary The settings of `typhapki::certs::shipped`: a set issued elsewhere, staged in
#   `shipped_dir` for `typhapki install --from`.
#
# One struct per role: a node holds the certificate and key of each component it runs,
# and no other. A key (`shipped_typha_key`, `shipped_felix_key`) is `true` when the
# Sensitive key comes with the settings, as the class's own parameter.
type Typhapki::Certs::Shipped = Variant[
  Struct[{
    mode               => Enum['shipped'],
    role               => Enum['both'],
    shipped_dir        => Stdlib::Absolutepath,
    shipped_bundle     => String[1],
    shipped_typha_cert => String[1],
    shipped_typha_key  => Boolean[true],
    shipped_felix_cert => String[1],
    shipped_felix_key  => Boolean[true],
  }],
  Struct[{
    mode               => Enum['shipped'],
    role               => Enum['typha'],
    shipped_dir        => Stdlib::Absolutepath,
    shipped_bundle     => String[1],
    shipped_typha_cert => String[1],
    shipped_typha_key  => Boolean[true],
  }],
  Struct[{
    mode               => Enum['shipped'],
    role               => Enum['felix'],
    shipped_dir        => Stdlib::Absolutepath,
    shipped_bundle     => String[1],
    shipped_felix_cert => String[1],
    shipped_felix_key  => Boolean[true],
  }],
]
