# @summary The Typha ferm rule: `strict` lists every node address, `relaxed` the networks.
type Typhapki::FermMode = Enum['strict', 'relaxed']
