"""contrib/systemd: the metrics service and timer pass `systemd-analyze verify`, and
the service follows the node configuration file the Puppet module writes."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from tests.conftest import ROOT, require, typhapki_cmd

UNITS = ROOT / "contrib" / "systemd"
INSTALLED = "/usr/bin/typhapki"


def _verify(directory: Path) -> subprocess.CompletedProcess[str]:
    require("systemd-analyze")
    units = sorted(str(p) for p in directory.glob("typhapki-metrics.*"))
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path, mutate: str = "") -> Path:
    """The units, ExecStart pointed at this checkout's typhapki (where the package puts
    /usr/bin/typhapki): verify insists that the command exists."""
    [exe] = [c for c in typhapki_cmd() if c.endswith("typhapki")]
    for unit in UNITS.glob("typhapki-metrics.*"):
        text = unit.read_text().replace(f"ExecStart={INSTALLED} ", f"ExecStart={exe} ")
        (tmp_path / unit.name).write_text(text + mutate * unit.name.endswith(".service"))
    return tmp_path


def test_units_verify_cleanly(tmp_path: Path) -> None:
    service = (UNITS / "typhapki-metrics.service").read_text()
    assert f"ExecStart={INSTALLED} metrics " in service
    proc = _verify(_copy(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # not even a warning


def test_verify_catches_a_mistake(tmp_path: Path) -> None:
    proc = _verify(_copy(tmp_path, mutate="ExecStartPre=relative/path\n"))
    assert proc.returncode != 0 or proc.stderr.strip(), "verify would catch nothing"


def test_timer_refreshes_every_few_minutes() -> None:
    timer = (UNITS / "typhapki-metrics.timer").read_text()
    assert "OnUnitActiveSec=5min" in timer and "WantedBy=timers.target" in timer


def _service_environment() -> dict[str, str]:
    service = (UNITS / "typhapki-metrics.service").read_text()
    pairs = re.findall(r'^Environment="(\w+)=(.*)"$', service, re.M)
    return dict(pairs)


def test_service_has_no_default_of_its_own_but_the_modules() -> None:
    """The timer reads the node configuration file the module writes: no --out or
    --textfile-dir that could differ from the module's (issue 22)."""
    module = yaml.safe_load((ROOT / "puppet" / "typhapki" / "data" / "common.yaml").read_text())
    service = (UNITS / "typhapki-metrics.service").read_text()
    env = _service_environment()
    assert env == {"TYPHAPKI_CONFIG": module["typhapki::config_file"], "TYPHAPKI_METRICS_ARGS": ""}
    assert f"ExecStart={INSTALLED} metrics $TYPHAPKI_METRICS_ARGS\n" in service
    textfile_dir = module["typhapki::monitoring::textfile_dir"]
    assert f"ReadWritePaths=-{textfile_dir}\n" in service


def test_service_command_follows_the_node_configuration(tmp_path: Path, issued: Path) -> None:
    """The service's command line, as systemd expands it, writes the metrics of the set
    named by the node configuration file into the textfile directory it names."""
    textfile_dir = tmp_path / "textfile"
    textfile_dir.mkdir()
    config = tmp_path / "typhapki.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "defaults": {"out": str(issued), "state_dir": str(tmp_path / "state")},
                "commands": {"metrics": {"textfile_dir": str(textfile_dir)}},
            }
        )
    )
    service = (UNITS / "typhapki-metrics.service").read_text()
    [exec_start] = re.findall(r"^ExecStart=(.*)$", service, re.M)
    env = {**_service_environment(), "TYPHAPKI_CONFIG": str(config)}
    # systemd splits an unquoted $VAR into words; an empty one is no word at all.
    words = [
        word
        for part in exec_start.split()
        for word in (env[part[1:]].split() if part.startswith("$") else [part])
    ]
    assert words[:2] == [INSTALLED, "metrics"]
    argv = [*typhapki_cmd(), *words[1:], "--no-probe"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = (textfile_dir / "typhapki.prom").read_text()
    assert 'typhapki_set_valid{cluster=""} 1.0' in text, text
    assert re.search(r'^typhapki_cert_not_before_timestamp_seconds\{.*role="typha"', text, re.M)


def test_module_marker_is_valid_exposition() -> None:
    """typhapki::monitoring's marker file, which TyphapkiMetricsStale joins on."""
    require("promtool")
    marker = ROOT / "puppet" / "typhapki" / "files" / "typhapki-expected.prom"
    proc = subprocess.run(["promtool", "check", "metrics"], input=marker.read_text(),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker.read_text().splitlines()[-1] == "typhapki_metrics_expected 1"
