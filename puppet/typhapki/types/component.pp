# @summary A component that reads the certificates and must be restarted when they change.
type Typhapki::Component = Enum['typha', 'felix']
