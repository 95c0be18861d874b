# A worker that does not run Typha: only Felix's set, issued on the workstation and
# shipped from the Puppet server's secret store (`typhapki install --from`).
#
# Hiera (on the Puppet server): hieradata/common.yaml and hieradata/shipped.yaml.
#
#   puppet apply --detailed-exitcodes examples/shipped.pp
class { 'typhapki':
  cluster => 'staging-eqiad',
  role    => 'felix',
}
