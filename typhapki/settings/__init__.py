"""Options resolved into settings, below every command: one layer that `commands/`,
`puppet/` and `monitoring/` read and that imports none of them.

- `pki`: the certificate options and the validated `PkiSettings` they make;
- `signer`: the signer options (`--signer`, `--cfssl-*`);
- `cluster`: a hiera cluster's `typha:` mapping under the flags (flags win);
- `desired`: everything above resolved into one desired state for check, issue and install.
"""
