# @summary The settings of `typhapki::certs::local`: the node signs its set with the
#   cluster CA in `ca_dir`.
#
# Either the CA comes from the Puppet server (`ca_cert` and `ca_key`, both), or neither
# does and `typhapki ca init` makes one on the node (a single-node lab only). `ca_key`
# is `true` when the Sensitive key comes with the settings, as the class's own
# parameter: the struct says which secret is there, never what it is. The emergency CA
# roll's new CA (`new_ca_cert` and `new_ca_key`, both) comes with the cluster CA.
type Typhapki::Certs::Local = Variant[
  Struct[{
    mode   => Enum['local'],
    role   => Typhapki::Role,
    ca_dir => Stdlib::Absolutepath,
  }],
  Struct[{
    mode    => Enum['local'],
    role    => Typhapki::Role,
    ca_dir  => Stdlib::Absolutepath,
    ca_cert => String[1],
    ca_key  => Boolean[true],
  }],
  Struct[{
    mode        => Enum['local'],
    role        => Typhapki::Role,
    ca_dir      => Stdlib::Absolutepath,
    ca_cert     => String[1],
    ca_key      => Boolean[true],
    new_ca_dir  => Stdlib::Absolutepath,
    new_ca_cert => String[1],
    new_ca_key  => Boolean[true],
  }],
]
