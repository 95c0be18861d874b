from __future__ import annotations

import json
from pathlib import Path

from typhapki.commands import CommandRequest


def inspect(paths: list[Path], as_json: bool) -> int:
    from datetime import UTC, datetime

    from typhapki.pki.certinfo import describe, render_text
    from typhapki.pki.pem import load_certs

    now = datetime.now(UTC)
    # Load everything first: a bad path fails the command before anything prints.
    loaded = [(path, load_certs(path, "certificate")) for path in paths]
    if as_json:
        print(
            json.dumps({str(p): [describe(c, now) for c in certs] for p, certs in loaded}, indent=2)
        )
        return 0
    blocks = [
        render_text(str(p), i, describe(c, now)) for p, certs in loaded for i, c in enumerate(certs)
    ]
    print("\n\n".join(blocks))
    return 0


def run(request: CommandRequest) -> int:
    """`inspect`."""
    return inspect(request.paths, request.json_out)
