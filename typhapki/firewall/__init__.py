"""The Typha ferm rule: hostname validation, the DNS gate and the rule's rendering."""
