# A Typha host of a lab cluster: the node signs its own set with the cluster CA.
#
# Hiera (on the Puppet server): hieradata/common.yaml (the fleet's clusters) and
# hieradata/local.yaml (mode and the CA from the secret store).
#
#   puppet apply --detailed-exitcodes examples/local.pp
class { 'typhapki':
  cluster => 'staging-eqiad',
  role    => 'both',
}
