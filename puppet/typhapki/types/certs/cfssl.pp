# @summary The settings of `typhapki::certs::cfssl`: the node makes its keys and a cfssl
#   server signs them.
#
# An auth key (`cfssl_auth_key`, and per profile `cfssl_auth_key_typha`,
# `cfssl_auth_key_felix`) is `true` when the Sensitive key comes with the settings, as
# the class's own parameter. `cfssl_client_cert` is `puppet` (this node's Puppet agent
# certificate) or the path of a certificate on the node, whose key is at
# `cfssl_client_key`.
type Typhapki::Certs::Cfssl = Struct[{
  mode                           => Enum['cfssl'],
  role                           => Typhapki::Role,
  cfssl_url                      => Typhapki::CfsslUrl,
  Optional[cfssl_auth_key]       => Boolean[true],
  Optional[cfssl_auth_key_typha] => Boolean[true],
  Optional[cfssl_auth_key_felix] => Boolean[true],
  Optional[cfssl_ca_cert]        => String[1],
  Optional[cfssl_client_cert]    => Variant[Enum['puppet'], Stdlib::Absolutepath],
  Optional[cfssl_client_key]     => Stdlib::Absolutepath,
  Optional[cfssl_profile_typha]  => Typhapki::CfsslName,
  Optional[cfssl_profile_felix]  => Typhapki::CfsslName,
  Optional[cfssl_label]          => Typhapki::CfsslName,
}]
