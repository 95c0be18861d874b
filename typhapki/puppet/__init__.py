"""Puppet's side: hiera loading, cluster settings, the Facter fact and the hiera lint."""
