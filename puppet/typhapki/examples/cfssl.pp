# A Typha host whose keys are made on the node and signed by the fleet's cfssl server.
#
# Hiera (on the Puppet server): hieradata/common.yaml and hieradata/cfssl.yaml (the
# cfssl URL, profiles and the authsign key from the secret store).
#
#   puppet apply --detailed-exitcodes examples/cfssl.pp
class { 'typhapki':
  cluster => 'staging-eqiad',
  role    => 'both',
}
