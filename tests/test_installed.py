"""The installed Debian package end to end, as a fleet node runs it: /usr/bin/typhapki
on Debian's python3 libraries, the ferm templates from /usr/share/typhapki, a real
dnsmasq for the DNS gate. Runs in the Debian leg of scripts/test.sh (after
`apt-get install ./typhapki_*.deb`)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import INSTALLED_COMMAND, INSTALLED_LEGS, LEG
from tests.support.dns import Dnsmasq, dnsmasq_server

__all__ = ["dnsmasq_server"]

TEMPLATES = Path("/usr/share/typhapki/ferm_templates")
HIERA = """\
kubernetes::clusters:
  main:
    lab:
      ipv6dualstack: true
      cluster_nodes:
        - n1.lab.test
        - n2.lab.test
"""
RECORDS = {
    "n1.lab.test": ["10.250.1.1", "fd00:5473::1"],
    "n2.lab.test": ["10.250.2.2", "fd00:5473::2"],
}


@pytest.fixture(autouse=True)
def _debian_leg() -> None:
    if LEG not in INSTALLED_LEGS:
        pytest.skip("the installed package runs in the Debian leg (scripts/test.sh)")


def installed(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(INSTALLED_COMMAND), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_ca_init_issue_check_ferm_with_the_installed_command(
    tmp_path: Path, dnsmasq_server: Callable[..., Dnsmasq]
) -> None:
    ca, out = tmp_path / "ca", tmp_path / "out"
    assert installed("ca", "init", "--ca-dir", ca).returncode == 0
    issued = installed("issue", "--ca-dir", ca, "--out", out, "--json")
    assert issued.returncode == 0, issued.stderr
    json.loads(issued.stdout)
    checked = installed("check", "--ca-dir", ca, "--out", out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # A missing key is a problem `check` reports with exit 1, one line per problem.
    key = next(out.rglob("*.key"))
    key.unlink()
    assert installed("check", "--out", out).returncode == 1

    dns = dnsmasq_server(RECORDS)
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(HIERA)
    rule = tmp_path / "10_typha"
    ferm: list[str | Path] = ["ferm", "--hiera", hiera, "--cluster", "lab", "--nameserver", dns.arg]
    rendered = installed(*ferm, "--output", rule)
    assert rendered.returncode == 0, rendered.stderr
    text = rule.read_text()
    for address in ("10.250.1.1", "10.250.2.2", "fd00:5473::1", "fd00:5473::2"):
        assert address in text
    assert installed(*ferm, "--output", rule, "--check").returncode == 0
    # A node that stops resolving: no rule is written, the old one stays.
    dns2 = dnsmasq_server({"n1.lab.test": RECORDS["n1.lab.test"]})
    failed = installed(*ferm[:-1], dns2.arg, "--output", rule)
    assert failed.returncode != 0
    assert "n2.lab.test" in failed.stderr
    assert rule.read_text() == text


def test_the_installed_package_finds_its_templates_under_usr_share() -> None:
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", "from typhapki.firewall import ferm; print(ferm.TEMPLATES_DIR)"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
        timeout=60,
    )
    assert proc.stdout.strip() == str(TEMPLATES)
    assert {p.name for p in TEMPLATES.iterdir()} >= {"plain.ferm.j2", "function.ferm.j2"}


def test_help_of_every_command_on_debian_typer() -> None:
    from typhapki.cli import docgen

    for command in docgen.commands():
        result = installed(*command.path, "--help")
        assert result.returncode == 0, (command.path, result.stderr)
        assert "Traceback" not in result.stdout + result.stderr


def test_contrib_units_and_rules_are_installed_as_in_the_tree() -> None:
    """contrib/systemd units under /usr/lib/systemd/system (not enabled by the package),
    contrib/prometheus files under /usr/share/typhapki/prometheus."""
    from tests.conftest import SOURCE

    places = {
        "systemd": Path("/usr/lib/systemd/system"),
        "prometheus": Path("/usr/share/typhapki/prometheus"),
    }
    for name, target in places.items():
        source = SOURCE / "contrib" / name
        shipped = sorted(source.glob("*")) if source.is_dir() else []
        if name == "systemd":
            shipped = [p for p in shipped if p.suffix in (".service", ".timer")]
        for path in shipped:
            assert (target / path.name).read_bytes() == path.read_bytes(), path
            for line in path.read_text().splitlines():  # the unit's documentation exists
                if line.startswith("Documentation="):
                    for uri in line.split("=", 1)[1].split():
                        if uri.startswith("file://"):
                            assert Path(uri.removeprefix("file://")).is_file(), (path, uri)
