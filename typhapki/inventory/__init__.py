"""What Puppet hands this node, parsed and validated: the fleet's hiera inventory (its
clusters, their nodes and their `typha:` mapping: `hiera`), the pure value checks it
needs (`hostnames`: host names, addresses, networks, ports) and the Puppet agent's SSL
files (`agent_ssl`). Below the settings: it imports only the base modules, the option
table (typhapki/options.py) and pki's certificate parser for `typha.trust`."""
