"""Monitoring: what a node's certificates, running components and ferm rule look like.

`status` gathers everything once and never raises; `metrics` turns it into the
Prometheus text format, `nagios` into a monitoring-plugins status line, and the
Facter fact (typhapki/puppet/facts.py) carries the same restart and probe results.
"""
