"""The fleet view: what PuppetDB knows of every node's set (docs/fleet.md)."""
