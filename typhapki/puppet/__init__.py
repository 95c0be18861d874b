"""Puppet's side: hiera loading, cluster settings, the Facter fact and the hiera lint."""

# The fact's name, for what reads it without building it (the fleet view, PuppetDB).
FACT_NAME = "typhapki"
