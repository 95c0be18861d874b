"""Puppet's side: the Facter fact, the hiera lint and the agent's SSL files."""

# The fact's name, for what reads it without building it (the fleet view, PuppetDB).
FACT_NAME = "typhapki"
