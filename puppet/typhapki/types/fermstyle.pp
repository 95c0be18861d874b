# @summary How the rule is written: a `plain` domain/chain block or a `function` call (&R_SERVICE).
type Typhapki::FermStyle = Enum['plain', 'function']
