# @summary A resolver for the DNS gate: an IP address, optionally with a port
# (`10.3.0.1`, `10.3.0.1:5353`, `2001:db8::1`, `[2001:db8::1]:5353`).
type Typhapki::Nameserver = Variant[
  Stdlib::IP::Address::Nosubnet,
  Pattern[/\A(\d{1,3}\.){3}\d{1,3}:\d{1,5}\z/, /\A\[[0-9A-Fa-f:.]+\]:\d{1,5}\z/],
]
