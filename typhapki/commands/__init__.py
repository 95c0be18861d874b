"""One module per subcommand: each turns parsed options into calls on the core and
returns an exit code. Heavy imports stay inside the functions so that a fast
command (check, facts) does not pay for a slow one (ferm, lint-hiera)."""
