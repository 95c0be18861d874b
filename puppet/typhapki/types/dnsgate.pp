# @summary When a cluster node does not resolve: `enforce` fails and keeps the old rule,
# `warn` writes the rule without it and reports it.
type Typhapki::DnsGate = Enum['enforce', 'warn']
