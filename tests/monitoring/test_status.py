"""One gathered status: the fact, the metrics and `check --nagios` never disagree.

States are generated (hypothesis): sets issued by one CA or another, in CA rotation
stages the monitoring was not told about (a second CA in the bundle), at some age,
damaged in generated ways. For each, the fact's `valid`, the `typhapki_set_valid`
series and the Nagios state are computed from the same node, as the facts.d wrapper,
the metrics timer and NRPE would ask for them (typhapki/monitoring/status.py
`judge_set` is the verdict all three render).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.pki.test_plan import DAMAGE, NODE, damage
from tests.support.issuing import ensure_local
from typhapki.monitoring.metrics import render
from typhapki.monitoring.nagios import NagiosState, evaluate
from typhapki.monitoring.status import StatusRequest, collect
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.puppet.facts import FactRequest, gather

NOW = datetime.now(UTC)
BOTH = [RoleName.TYPHA, RoleName.FELIX]


@pytest.fixture(scope="module")
def two_cas(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("cas")
    dirs = [root / "ca0", root / "ca1"]
    for directory in dirs:
        init_ca(directory, KeyType.ECDSA_P256, 3650, None, False, NOW - timedelta(days=500))
    return dirs


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
)
# Rotation stage 2 (leaves by the new CA, both trusted) with monitoring told the old
# CA only: the fact said valid while typhapki_set_valid was 0.
@example(signer=1, stage="reissue", age_days=0, hurt="none", told=0)
def test_fact_metrics_and_nagios_agree(
    two_cas: list[Path],
    tmp_path_factory: pytest.TempPathFactory,
    signer: int,
    stage: str,
    age_days: int,
    hurt: str,
    told: int,
) -> None:
    out = tmp_path_factory.mktemp("node") / "out"
    wanted = PkiSettings(node_name=NODE)
    trusted = [] if stage == "none" else [load_issuer(two_cas[1 - signer]).cert]
    when = NOW - timedelta(days=age_days)
    ensure_local(out, load_issuer(two_cas[signer]), wanted, BOTH, trusted, now=when)
    damage(out, hurt)
    ca_dir = two_cas[told]  # the one CA the monitoring was configured with

    fact = gather(
        FactRequest(out=out, ca_dir=ca_dir, probe=False, state_dir=out.parent), lambda: wanted
    )
    fact_valid = fact["typhapki"]["set"]["valid"]
    request = StatusRequest(out, ca_dir=ca_dir, probe=False, ferm_state=False)
    status = collect(request, lambda: wanted)
    assert status.report is not None
    series = [
        ln for ln in render(status).decode().splitlines() if ln.startswith("typhapki_set_valid")
    ]
    assert len(series) == 1, series
    metric_valid = series[0].endswith(" 1.0") or series[0].endswith(" 1")
    state = evaluate(status).state

    assert fact_valid == metric_valid == status.report.ok, (fact_valid, series, stage)
    lasting = [p for p in status.report.problems if "due for renewal" not in p.message]
    if fact_valid:
        assert state in (NagiosState.OK, NagiosState.WARNING), evaluate(status)
    elif lasting:
        assert state is NagiosState.CRITICAL, evaluate(status)
    else:  # only due for renewal: never OK
        assert state in (NagiosState.WARNING, NagiosState.CRITICAL), evaluate(status)
