# @summary The settings of `typhapki::certs` in any issuance mode, told apart by `mode`.
#
# `typhapki::certs` builds them from its parameters and hands them to its mode's class,
# whose parameter type (`Typhapki::Certs::Local`, `Typhapki::Certs::Shipped`,
# `Typhapki::Certs::Cfssl`) refuses a parameter of another mode or one missing for the
# node's role.
type Typhapki::Certs::Settings = Variant[
  Typhapki::Certs::Local,
  Typhapki::Certs::Shipped,
  Typhapki::Certs::Cfssl,
]
