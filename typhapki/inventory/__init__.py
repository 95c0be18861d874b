"""The hiera inventory: the fleet's clusters, their nodes and their `typha:` mapping,
parsed and validated (`hiera`), with the pure value checks it needs (`hostnames`:
host names, addresses, networks, ports). Below the settings: it imports only the
base modules and the option table (typhapki/settings/options.py)."""
