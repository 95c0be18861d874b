"""The command line: the console entry (console.py), the error boundary around the one
dispatch (boundary.py), the fast path that parses `check`, `facts` and `metrics` from
the option table alone (fast_path.py), typer's app built from the same table
(typer_app.py), the node configuration file (nodeconfig.py) and the files generated
from the table (docgen.py)."""
