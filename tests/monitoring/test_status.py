"""One gathered status: the fact, the metrics and `check --nagios` never disagree, and
agree with `check`.

States are generated (hypothesis): sets issued by one CA or another, in CA rotation
stages (a second CA in the bundle), at some age, damaged in generated ways. The node's
commands are told one CA (`--ca-dir`, or cfssl's cached CA) and a hiera cluster whose
``typha.trust`` lists what a rotation stage lists (nothing, the other CA, the told CA
again). For each state, the fact's `valid`, the `typhapki_set_valid` series, the Nagios
state and `check`'s exit code are computed from the same node by the same command lines
the facts.d wrapper, the metrics timer, NRPE and Puppet's `unless` run
(typhapki/settings/desired.py `observe` and `resolve` resolve them;
typhapki/monitoring/status.py `judge_set` is the verdict the first three render).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.pki.test_plan import DAMAGE, NODE, damage
from tests.support.issuing import ensure_local
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.signers import ca_cache

NOW = datetime.now(UTC)
BOTH = [RoleName.TYPHA, RoleName.FELIX]


@pytest.fixture(scope="module")
def two_cas(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("cas")
    dirs = [root / "ca0", root / "ca1"]
    for directory in dirs:
        init_ca(directory, KeyType.ECDSA_P256, 3650, None, False, NOW - timedelta(days=500))
    return dirs


# cfssl mode: a signer nobody listens at; the CA comes from the cache check and issue keep.
CFSSL_URL = "http://127.0.0.1:9"
CLUSTER = "staging-eqiad"


def _hiera(path: Path, trust: list[Path]) -> list[str]:
    """A cluster whose typha.trust lists these CAs (PEM text, as in docs/rotation.md)."""
    typha: dict[str, Any] = {"typha_cn": "calico-typha"}
    if trust:
        typha["trust"] = [ca.read_text() for ca in trust]
    doc = {
        "kubernetes::clusters": {
            "main": {CLUSTER: {"cluster_nodes": ["kube1001.example"], "typha": typha}}
        }
    }
    path.write_text(yaml.safe_dump(doc))
    return ["--hiera", str(path), "--cluster", CLUSTER]


def _cache(ca_dir: Path) -> None:
    """cfssl's CA as `check` last cached it, fresh: nothing asks the (absent) signer."""
    cert = load_issuer(ca_dir).cert
    now = int(time.time())
    state = Path(os.environ["TYPHAPKI_STATE_DIR"])
    for profile in ("typha", "felix"):
        entry = ca_cache.CachedCa(cert, now, now + 3600, now)
        ca_cache.write(
            ca_cache.cache_path(state, CFSSL_URL, "", profile), CFSSL_URL, "", entry, profile
        )


@settings(
    max_examples=int(os.environ.get("TYPHAPKI_PLAN_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    signer=st.sampled_from([0, 1]),
    stage=st.sampled_from(["none", "trust-new", "reissue"]),
    age_days=st.sampled_from([0, 100, 250, 400]),
    hurt=st.sampled_from(DAMAGE),
    told=st.sampled_from([0, 1]),
    hiera_trust=st.sampled_from(["none", "other", "told"]),
    mode=st.sampled_from(["local", "cfssl"]),
)
# Rotation stage 2 (leaves by the new CA, both trusted) with monitoring told the old
# CA only: the fact said valid while typhapki_set_valid was 0.
@example(
    signer=1, stage="reissue", age_days=0, hurt="none", told=0, hiera_trust="none", mode="local"
)
# Hiera's typha.trust moved to stage 1 (trust the new CA) before the node's issue ran:
# check says the bundle must change; the fact and the metric ignored typha.trust and
# called the set valid.
@example(signer=0, stage="none", age_days=0, hurt="none", told=0, hiera_trust="other", mode="local")
@example(signer=0, stage="none", age_days=0, hurt="none", told=0, hiera_trust="other", mode="cfssl")
# Stage 2 staged in hiera (sign with the new CA, trust the old one) and reached on disk.
@example(
    signer=1, stage="reissue", age_days=0, hurt="none", told=1, hiera_trust="other", mode="cfssl"
)
def test_fact_metrics_nagios_and_check_agree(
    two_cas: list[Path],
    tmp_path_factory: pytest.TempPathFactory,
    signer: int,
    stage: str,
    age_days: int,
    hurt: str,
    told: int,
    hiera_trust: str,
    mode: str,
) -> None:
    node = tmp_path_factory.mktemp("node")
    out = node / "out"
    wanted = PkiSettings(node_name=NODE)
    trusted = [] if stage == "none" else [load_issuer(two_cas[1 - signer]).cert]
    when = NOW - timedelta(days=age_days)
    ensure_local(out, load_issuer(two_cas[signer]), wanted, BOTH, trusted, now=when)
    damage(out, hurt)
    ca_dir = two_cas[told]  # the one CA the node's commands are told
    trust = {"none": [], "other": [two_cas[1 - told]], "told": [ca_dir]}[hiera_trust]
    hiera = _hiera(node / "hiera.yaml", [d / "typhaca.crt" for d in trust])
    if mode == "local":
        where = ["--ca-dir", str(ca_dir)]
    else:
        _cache(ca_dir)
        where = ["--signer", "cfssl", "--cfssl-url", CFSSL_URL]
    common = ["--out", str(out), *where, *hiera, "--node-name", NODE]

    fact_run = run_cli("facts", *common, "--no-probe")
    fact = json.loads(fact_run.stdout)["typhapki"]
    assert fact["error"] is None, fact["error"]
    fact_valid = fact["set"]["valid"]
    metrics = run_cli("metrics", *common, "--no-probe")
    assert metrics.returncode == 0, metrics.stderr
    series = [ln for ln in metrics.stdout.splitlines() if ln.startswith("typhapki_set_valid")]
    assert len(series) == 1, series
    metric_valid = series[0].endswith(" 1.0") or series[0].endswith(" 1")
    nagios = run_cli("check", "--nagios", *common, "--no-probe")
    state = nagios.returncode
    check = run_cli("check", *common, "--quiet")

    why = (fact_valid, series, nagios.stdout, check.returncode, check.stdout, check.stderr)
    assert fact_valid == metric_valid, why
    lasting = [p for p in fact["set"]["problems"] if "due for renewal" not in p["message"]]
    if fact_valid:
        assert state in (0, 1), why  # OK, or WARNING: renewal overdue
    elif lasting:
        assert state == 2, why
    else:  # only due for renewal: never OK
        assert state in (1, 2), why
    # check says what the three say. The one exception: monitoring told no trust list at
    # all judges a bundle of two CAs as a rotation `rotate-ca` drives (stage 1 or 2),
    # which check, told nothing either, would undo (Puppet pauses check then).
    assert check.returncode in (0, 1, 3), why
    untold_rotation = hiera_trust == "none" and len(fact["set"]["bundle"]["cas"]) == 2
    if untold_rotation:
        assert fact_valid or check.returncode != 0, why  # only "valid" may differ
    else:
        assert (check.returncode == 0) == fact_valid, why


def test_metrics_and_nagios_probe_the_tls_typha_beside_a_plain_one(
    issued: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live switch's parallel stage: a plain Typha (no TLS env, Calico's port) and a
    TLS one on its own port. The status `metrics` and `check --nagios` render probes the
    TLS one (found from /proc: its TYPHA_SERVERPORT and TLS variables), never the plain
    one as a TLS Typha that failed."""
    from tests.support.gopeers import typha_env
    from tests.support.processes import seen_alone, start_named
    from tests.support.tlspeers import _server_context, typha_files
    from typhapki.monitoring.status import StatusRequest, collect

    context = _server_context(typha_files(issued))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        held: list[Any] = []

        def serve() -> None:
            conn, _ = listener.accept()
            conn.settimeout(5)
            held.append(context.wrap_socket(conn, server_side=True))

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        started = [
            start_named(tmp_path, "calico-typha", env={"PATH": "/bin"}),
            start_named(
                tmp_path, "calico-typha", env={**typha_env(issued), "TYPHA_SERVERPORT": str(port)}
            ),
        ]
        try:
            with seen_alone(monkeypatch, started):
                status = collect(StatusRequest(issued, ferm_state=False), PkiSettings)
        finally:
            thread.join(5)
            for conn in held:
                conn.close()
    assert status.probe is not None, status.errors
    assert status.probe.address == f"127.0.0.1:{port}" and status.probe.accepted
