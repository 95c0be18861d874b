"""contrib/prometheus: the alert rules pass promtool, and their unit tests fire each
alert on the series that should fire it and keep it quiet on healthy ones."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT, require, run_cli

RULES = ROOT / "contrib" / "prometheus" / "typhapki.rules.yml"
TESTS = ROOT / "contrib" / "prometheus" / "typhapki.rules.test.yml"
DOCS = ROOT / "docs" / "monitoring.md"


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for group in doc["groups"] for r in group["rules"] if "alert" in r]


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    require("promtool")
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_promtool_check_rules() -> None:
    proc = _promtool("check", "rules", str(RULES), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in proc.stdout


def test_promtool_test_rules() -> None:
    proc = _promtool("test", "rules", TESTS.name, cwd=TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_is_tested_firing_and_quiet() -> None:
    doc = yaml.safe_load(TESTS.read_text())
    fired: dict[str, set[str]] = {}
    quiet: set[str] = set()
    for group in doc["tests"]:
        instances = {
            m[1]
            for s in group["input_series"]
            if (m := re.search(r'instance="(\w+)"', s["series"]))
        }
        for case in group["alert_rule_test"]:
            got = {a["exp_labels"]["instance"] for a in case["exp_alerts"]}
            fired.setdefault(case["alertname"], set()).update(got)
            if instances - got:
                quiet.add(case["alertname"])  # some series in this case must not fire
    names = {a["alert"] for a in _alerts()}
    assert names <= {n for n, got in fired.items() if got}, "an alert is never seen firing"
    assert names <= quiet, "an alert is never shown quiet on a healthy series"


def test_every_alert_has_a_runbook_section() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in DOCS.read_text().splitlines()
        if line.startswith("#")
    }
    for alert in _alerts():
        url = alert["annotations"]["runbook_url"]
        assert url.endswith(f"docs/monitoring.md#{alert['alert'].lower()}"), url
        assert alert["alert"].lower() in anchors, f"docs/monitoring.md has no {alert['alert']}"
        assert alert["annotations"]["summary"]


def test_rules_fail_when_an_alert_is_missing(tmp_path: Path) -> None:
    """The unit tests can fail: without the restart-pending alert they do."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("alert") != "TyphapkiRestartPending"]
    (tmp_path / RULES.name).write_text(yaml.safe_dump(doc))
    tests = yaml.safe_load(TESTS.read_text())
    tests["tests"] = [t for t in tests["tests"] if t["name"] == "restart pending too long"]
    (tmp_path / TESTS.name).write_text(yaml.safe_dump(tests))
    proc = _promtool("test", "rules", TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0 and "TyphapkiRestartPending" in proc.stdout + proc.stderr


def test_certificate_alerts_use_check_nagios_thresholds() -> None:
    """The rules and `check --nagios` judge a certificate with the same numbers."""
    from typhapki.monitoring.nagios import CRITICAL_FRACTION, GRACE_FRACTION, GRACE_MAX

    exprs = {a["alert"]: " ".join(a["expr"].split()) for a in _alerts()}
    overdue = exprs["TyphapkiCertificateRenewalOverdue"]
    assert f") / {GRACE_FRACTION}, {int(GRACE_MAX.total_seconds())})" in overdue, overdue
    tenth = f"typhapki_cert_not_before_timestamp_seconds) / {CRITICAL_FRACTION}"
    assert tenth in overdue and tenth in exprs["TyphapkiCertificateNearExpiry"]


def test_certificate_alerts_are_tested_over_24h_28d_and_365d_leaves() -> None:
    doc = yaml.safe_load(TESTS.read_text())
    lifetimes = set()
    for group in doc["tests"]:
        series = {s["series"].split("{")[0]: s["values"] for s in group["input_series"]}
        after = series.get("typhapki_cert_not_after_timestamp_seconds")
        before = series.get("typhapki_cert_not_before_timestamp_seconds")
        if after is None or before is None:
            continue
        alerts = {c["alertname"] for c in group["alert_rule_test"] if c["exp_alerts"]}
        assert alerts == {"TyphapkiCertificateRenewalOverdue", "TyphapkiCertificateNearExpiry"}
        lifetimes.add(int(after.split("x")[0]) - int(before.split("x")[0]))
    assert lifetimes == {86400, 28 * 86400, 365 * 86400}


def _input_series(exposition: str, instance: str, samples: int) -> list[dict[str, str]]:
    """`typhapki metrics` output as promtool input series: each sample line held for
    `samples` evaluations, with the labels node_exporter's scrape adds."""
    series = []
    for line in exposition.splitlines():
        if not line or line.startswith("#"):
            continue
        selector, value = line.rsplit(" ", 1)
        name, _, labels = selector.partition("{")
        scraped = f'instance="{instance}",job="node"'
        labels = f"{labels.rstrip('}')},{scraped}" if labels else scraped
        held = " ".join([repr(float(value))] * samples)
        series.append({"series": f"{name}{{{labels}}}", "values": held})
    return series


def test_collect_error_fires_over_the_real_metrics_of_a_failing_node(
    tmp_path: Path, ca_dir: Path
) -> None:
    """Two nodes' real `typhapki metrics`: one in cfssl mode with nothing cached (its
    collector cannot read the signer's CA: the state directory fault of issue 29), one
    healthy. TyphapkiCollectError fires for the first, on its settings source only."""
    out = tmp_path / "out"
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", out).returncode == 0
    healthy = run_cli("metrics", "--out", out, "--ca-dir", ca_dir, "--no-probe")
    failing = run_cli(
        "metrics", "--out", out, "--signer", "cfssl", "--cfssl-url", "http://127.0.0.1:9",
        "--no-probe",
    )  # fmt: skip
    assert healthy.returncode == failing.returncode == 0, (healthy.stderr, failing.stderr)
    assert failing.stderr.startswith("typhapki: metrics: settings: "), failing.stderr
    alert = next(a for a in _alerts() if a["alert"] == "TyphapkiCollectError")
    case = {
        "interval": "5m",
        "input_series": _input_series(healthy.stdout, "healthy", 13)
        + _input_series(failing.stdout, "failing", 13),
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": alert["alert"], "exp_alerts": []},
            {
                "eval_time": "55m",
                "alertname": alert["alert"],
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "instance": "failing",
                            "job": "node",
                            "source": "settings",
                            "severity": "warning",
                        },
                        "exp_annotations": {
                            key: text.replace("{{ $labels.instance }}", "failing").replace(
                                "{{ $labels.source }}", "settings"
                            )
                            for key, text in alert["annotations"].items()
                        },
                    }
                ],
            },
        ],
    }
    tests = {"rule_files": [str(RULES)], "evaluation_interval": "5m", "tests": [case]}
    (tmp_path / "collect.test.yml").write_text(yaml.safe_dump(tests))
    proc = _promtool("test", "rules", "collect.test.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
