from typhapki.cli.console import script

script()
