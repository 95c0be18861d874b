"""tests/support/cleanroot.py's machine root has exactly scripts/setup.sh's package list."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import SOURCE
from tests.support import cleanroot


def test_the_machine_root_installs_every_package_setup_sh_lists(tmp_path: Path) -> None:
    packages = cleanroot.machine_packages(SOURCE / "scripts" / "setup.sh")
    assert {"tini", "puppetserver", "puppetdb", "golang-cfssl", "python3-hatchling"} <= set(
        packages
    )
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", p) for p in packages), packages
    # Comments, blank lines and words after a package on its line are read as bash does.
    script = tmp_path / "setup.sh"
    script.write_text("X=1\nSYSTEM_PACKAGES=(\n  a b  # not-c\n\n  # d\n  e\n)\nOTHER=(f)\n")
    assert cleanroot.machine_packages(script) == ("a", "b", "e")
