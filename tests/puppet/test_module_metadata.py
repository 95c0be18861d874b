"""puppet/typhapki/metadata.json as the Forge reads it: the releases CI runs the module on
(Debian 12 in the debian leg, 13 in the trixie leg), Puppet and OpenVox over one range,
and metadata-json-lint (Debian's package) clean in its strict modes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import require
from tests.support.puppet import MODULE

RANGE = ">= 7.0.0 < 9.0.0"


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    require("metadata-json-lint")
    strict = ["--strict-dependencies", "--strict-license"]
    return subprocess.run(
        ["metadata-json-lint", *strict, str(path)], capture_output=True, text=True, timeout=120
    )


def test_metadata_names_debian_12_and_13_and_puppet_and_openvox() -> None:
    meta = json.loads((MODULE / "metadata.json").read_text())
    assert meta["operatingsystem_support"] == [
        {"operatingsystem": "Debian", "operatingsystemrelease": ["12", "13"]}
    ]
    assert meta["requirements"] == [
        {"name": "puppet", "version_requirement": RANGE},
        {"name": "openvox", "version_requirement": RANGE},
    ]
    readme = (MODULE / "README.md").read_text()
    tested = readme.split("\n## Tested versions\n", 1)[1].split("\n## ", 1)[0]
    for claim in ("Debian 12", "Debian 13", "Puppet 7.23", "Puppet 8.10", "OpenVox"):
        assert claim in tested, claim
    assert "untested" in tested and "not in Debian" in tested


def test_metadata_json_lint_passes_and_checks_the_openvox_range(tmp_path: Path) -> None:
    clean = _lint(MODULE / "metadata.json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # The linter reads the openvox entry: a range it cannot parse there is refused.
    meta = json.loads((MODULE / "metadata.json").read_text())
    for requirement in meta["requirements"]:
        if requirement["name"] == "openvox":
            requirement["version_requirement"] = ">= 8 <<< 9"
    broken = tmp_path / "metadata.json"
    broken.write_text(json.dumps(meta))
    refused = _lint(broken)
    assert refused.returncode != 0 and "requirements" in refused.stdout, refused.stdout
