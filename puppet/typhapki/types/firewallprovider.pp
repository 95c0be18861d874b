# @summary The firewall that carries the Typha rule: ferm (typhapki::ferm) or nftables
#   (typhapki::nftables).
type Typhapki::FirewallProvider = Enum['ferm', 'nftables']
