# @summary Which sets a node holds: Typha hosts `both`, other workers `felix` only.
type Typhapki::Role = Enum['typha', 'felix', 'both']
