"""The PKI front and a node's client certificate, without a puppetserver.

docs/issuance.md's Apache front before multirootca, trusting a CA of Puppet 7's shape
made here (tests/support/pkifront.py), whose agent certificates carry no SAN, as the
fleet's do. What a node sees at the front: in with its certificate, out once the CRL
revokes it (exit 5, the set kept), out with another CA's certificate.
test_pkifront.py runs the same front against the real puppetserver CA.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from tests.conftest import CliResult, assert_one_line_error, require, run_cli, typhapki_cmd
from tests.support import multirootca as multirootca_support
from tests.support.cfssl import write_auth_key
from tests.support.multirootca import Multirootca
from tests.support.pkifront import PkiFront, PuppetLikeCa
from typhapki.errors import EXIT_SIGNER
from typhapki.pki.pem import load_certs

pytestmark = pytest.mark.once("newest")  # heavy end to end: CI's newest leg (tests/conftest.py)

multirootca = multirootca_support.multirootca
LABEL = multirootca_support.LABELS[0]


@pytest.fixture(scope="module")
def lab_ca(tmp_path_factory: pytest.TempPathFactory) -> PuppetLikeCa:
    return PuppetLikeCa(tmp_path_factory.mktemp("puppetlike-ca"))


@pytest.fixture(scope="module")
def front(
    lab_ca: PuppetLikeCa, multirootca: Multirootca, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PkiFront]:
    server = PkiFront(tmp_path_factory.mktemp("pkifront"), lab_ca, multirootca.url)
    server.start()
    yield server
    server.stop()


def issue(
    front: PkiFront,
    out: Path,
    key: Path,
    cert: Path,
    client_key: Path,
    key_type: str = "ecdsa-p256",
) -> CliResult:
    """Felix's set through the front. A new --key-type makes `issue` ask the PKI again
    at once, as a renewal does (a leaf cannot be made due here: its lifetime is cfssl's)."""
    return run_cli(
        "issue", "--out", out, "--role", "felix", "--signer", "cfssl", "--cfssl-url", front.url,
        "--cfssl-auth-key", key, "--cfssl-label", LABEL, "--cfssl-ca-file", front.ca.ca_cert,
        "--cfssl-client-cert", cert, "--cfssl-client-key", client_key, "--node-name", out.name,
        "--key-type", key_type,
    )  # fmt: skip


def files_of(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_client_without_san_gets_in_until_the_crl_revokes_it(
    lab_ca: PuppetLikeCa, front: PkiFront, tmp_path: Path
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    cert, client_key = lab_ca.client("kubenosan1.eqiad.example")
    with pytest.raises(x509.ExtensionNotFound):
        load_certs(cert, "client")[0].extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
    node = tmp_path / "kubenosan1"
    first = issue(front, node, key, cert, client_key)
    assert first.returncode == 0, first.stderr
    again = issue(front, node, key, cert, client_key, "ecdsa-p384")  # the front lets it in again
    assert again.returncode == 0 and "nothing changed" not in again.stdout, again
    lab_ca.revoke(cert)
    front.reload_crl()
    before = files_of(node)
    refused = issue(front, node, key, cert, client_key, "ecdsa-p256")
    assert_one_line_error(refused, EXIT_SIGNER, "refused this node's client certificate", "revoked")
    assert files_of(node) == before


def test_a_client_of_another_ca_is_refused(front: PkiFront, tmp_path: Path) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    stranger = PuppetLikeCa(tmp_path / "other-ca")
    cert, client_key = stranger.client("kubestranger1.eqiad.example")
    refused = issue(front, tmp_path / "kubestranger1", key, cert, client_key)
    assert_one_line_error(refused, EXIT_SIGNER, front.url, "refused this node's client certificate")


def monitor(command: str, front: PkiFront, out: Path, *extra: str) -> CliResult:
    """facts, metrics or `check --nagios` on a cfssl node: they read, never ask."""
    return run_cli(
        *command.split(), "--out", out, "--role", "felix", "--signer", "cfssl",
        "--cfssl-url", front.url, "--cfssl-label", LABEL, "--no-probe", *extra,
    )  # fmt: skip


def age_ca_cache(hours: int) -> None:
    """The cached CA as it is `hours` later: stale, and past its retry time."""
    for path in (Path(os.environ["TYPHAPKI_STATE_DIR"]) / "signer-ca").glob("*.json"):
        doc = json.loads(path.read_text())
        for key in ("fetched_at", "fresh_until", "retry_after"):
            doc[key] -= hours * 3600
        path.write_text(json.dumps(doc))


def test_monitoring_sees_the_front_refuse_a_node(
    lab_ca: PuppetLikeCa, front: PkiFront, tmp_path: Path
) -> None:
    """Issue 39: the front refuses a node whose CA is cached. `check` still exits 0
    (the set serves); the fact, `check --nagios` and the metrics say the signer refused
    it and why, and TyphapkiSignerRefused fires over those real metrics, not over the
    same node's metrics before. Once the cache is gone, they say it was refused."""
    key = write_auth_key(tmp_path / "auth.key")
    cert, client_key = lab_ca.client("kuberefused1.eqiad.example")
    node = tmp_path / "kuberefused1"
    assert issue(front, node, key, cert, client_key).returncode == 0
    fact = json.loads(monitor("facts", front, node).stdout)["typhapki"]
    assert fact["ok"] is True and fact["signer"]["confirmed_at"], fact
    healthy = monitor("metrics", front, node)
    assert healthy.returncode == 0, healthy.stderr

    lab_ca.revoke(cert)
    front.reload_crl()
    age_ca_cache(hours=2)
    checked = run_cli(
        "check", "--out", node, "--role", "felix", "--signer", "cfssl", "--cfssl-url",
        front.url, "--cfssl-label", LABEL, "--cfssl-ca-file", front.ca.ca_cert,
        "--cfssl-client-cert", cert, "--cfssl-client-key", client_key,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "CA not confirmed" in checked.stdout + checked.stderr, checked
    fact = json.loads(monitor("facts", front, node).stdout)["typhapki"]
    assert fact["ok"] is False and fact["signer"]["refused"] is True, fact
    assert "certificate revoked" in fact["signer"]["reason"], fact["signer"]
    nagios = monitor("check --nagios", front, node)
    assert nagios.returncode == 1 and nagios.stdout.startswith("TYPHAPKI WARNING"), nagios
    assert "certificate revoked" in nagios.stdout.splitlines()[0]
    refused = monitor("metrics", front, node)
    assert 'typhapki_signer_refused{cluster=""} 1.0' in refused.stdout, refused.stdout
    _alert_fires_for_the_refused_node(healthy.stdout, refused.stdout, tmp_path)

    for path in (Path(os.environ["TYPHAPKI_STATE_DIR"]) / "signer-ca").glob("*.json"):
        path.unlink()  # the cache gone: what happened is still said
    fact = json.loads(monitor("facts", front, node).stdout)["typhapki"]
    assert "cfssl refused this node at" in fact["error"], fact
    assert "certificate revoked" in fact["error"] and "has not" not in fact["error"]
    nagios = monitor("check --nagios", front, node)
    assert nagios.returncode == 1 and "certificate revoked" in nagios.stdout, nagios


def _alert_fires_for_the_refused_node(healthy: str, refused: str, tmp_path: Path) -> None:
    from tests.contrib.test_prometheus_rules import RULES, _alerts, _input_series, _promtool

    alert = next(a for a in _alerts() if a["alert"] == "TyphapkiSignerRefused")
    case = {
        "interval": "5m",
        "input_series": _input_series(healthy, "healthy", 13)
        + _input_series(refused, "refused", 13),
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": alert["alert"], "exp_alerts": []},
            {
                "eval_time": "30m",
                "alertname": alert["alert"],
                "exp_alerts": [
                    {
                        # cluster="" is no label to Prometheus
                        "exp_labels": {"instance": "refused", "job": "node", "severity": "warning"},
                        "exp_annotations": {
                            k: v.replace("{{ $labels.instance }}", "refused")
                            for k, v in alert["annotations"].items()
                        },
                    }
                ],
            },
        ],
    }
    tests = {"rule_files": [str(RULES)], "evaluation_interval": "5m", "tests": [case]}
    (tmp_path / "refused.test.yml").write_text(yaml.safe_dump(tests))
    proc = _promtool("test", "rules", "refused.test.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_node_clock_behind_the_front_is_told_to_fix_its_time(
    lab_ca: PuppetLikeCa, front: PkiFront, tmp_path: Path
) -> None:
    """Issue 39 item 6: the front's certificate is not yet valid by a node whose clock
    runs an hour behind; the line names the clock (NTP), not --cfssl-ca-file."""
    require("faketime")
    key = write_auth_key(tmp_path / "auth.key")
    cert, client_key = lab_ca.client("kubelate1.eqiad.example")
    node = tmp_path / "kubelate1"
    proc = subprocess.run(
        [
            "faketime", "-f", "-1h", *typhapki_cmd(),
            "issue", "--out", str(node), "--role", "felix", "--signer", "cfssl",
            "--cfssl-url", front.url, "--cfssl-auth-key", str(key), "--cfssl-label", LABEL,
            "--cfssl-ca-file", str(front.ca.ca_cert), "--cfssl-client-cert", str(cert),
            "--cfssl-client-key", str(client_key), "--node-name", node.name,
        ],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    late = CliResult(proc.returncode, proc.stdout, proc.stderr)
    assert_one_line_error(late, EXIT_SIGNER, front.url, "clock", "NTP")
    assert "see --cfssl-ca-file" not in late.stderr
    assert not node.exists() or not any(node.rglob("*.crt"))
