"""One node configuration, one state directory, one verdict: `issue`, `check`, the fact,
the metrics, `check --nagios` and `typhapki fleet` (the fact as PuppetDB hands it back)
agree on one node whose node configuration names its state directory, as the typhapki
Puppet module writes it (`typhapki::state_dir` under `defaults:`); and, for every option
`check` takes from the option table (typhapki/options.py), set alone in that
node configuration, the fact, the metrics, `check --nagios` and `fleet` say what `check`
says (healthy or not): each reads it, and each refuses what `check` refuses
(typhapki/settings/desired.py `checked_signer`, `check_signer_renewal`).

Issue 29: facts and metrics read the node configuration's state_dir, check, issue and
check --nagios did not, so the signer-CA cache was written in one place and read in
another: on a healthy node the fact said ok: false, metrics a collector error and
`fleet` every node invalid. Here $TYPHAPKI_STATE_DIR names another directory, which
must stay empty. cfssl is Debian's real one (tests/support/cfssl.py); the hiera
cluster carries the fleet's pki_renew_seconds, whose renewal moment every reader must
report alike. PuppetDB is a loopback stand-in (tests/support/hostile_cfssl.py) that
answers the fleet view's three queries with the fact this node printed: the real one is
proven in tests/fleet/test_fleet_puppetdb.py. Every command runs in this process
(tests/support/inprocess.py); no process is started but cfssl.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_cli
from tests.pki.test_plan import damage
from tests.support.cfssl import CfsslServer, cfssl, write_auth_key
from tests.support.hostile_cfssl import Answer, HostileCfssl, hostile_cfssl
from typhapki import options

__all__ = ["cfssl", "hostile_cfssl"]  # the fixtures

CLUSTER = "staging-eqiad"
NODE = "kubestage1001.eqiad.wmnet"


def _node(tmp_path: Path, cfssl: CfsslServer) -> tuple[Path, Path, dict[str, str]]:
    """The node configuration and hiera a managed node has; returns OUT, the state
    directory and the environment every command runs with."""
    out, state = tmp_path / "out", tmp_path / "state"
    hiera = tmp_path / "hiera.yaml"
    cluster = {"cluster_nodes": [NODE], "pki_renew_seconds": 952200}
    hiera.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {CLUSTER: cluster}}}))
    config = tmp_path / "etc" / "typhapki.yaml"
    config.parent.mkdir()
    defaults = {
        "out": str(out),
        "signer": "cfssl",
        "cfssl_url": cfssl.url,
        "cfssl_auth_key": str(write_auth_key(tmp_path / "auth.key")),
        "state_dir": str(state),
        "node_name": NODE,
        "hiera": str(hiera),
        "cluster": CLUSTER,
        "no_probe": "true",
    }
    config.write_text(yaml.safe_dump({"version": 1, "defaults": defaults}))
    return out, state, {"TYPHAPKI_CONFIG": str(config)}


def _puppetdb(fact: dict[str, Any]) -> Callable[[str, bytes], Answer]:
    """PuppetDB's answers to the fleet view's queries, holding this node's fact."""
    produced = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    rows = {
        "resources": [{"certname": NODE, "parameters": {"cluster": CLUSTER}}],
        "facts": [{"certname": NODE, "value": fact}],
        "factsets": [{"certname": NODE, "producer_timestamp": produced}],
    }

    def respond(path: str, body: bytes) -> Answer:
        endpoint = path.rstrip("/").rsplit("/", 1)[-1]
        return Answer(body=json.dumps(rows.get(endpoint, [])).encode())

    return respond


def _series(metrics: str, name: str, **labels: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f"typhapki_{name}{{") and all(
            f'{k}="{v}"' in line for k, v in labels.items()
        ):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no typhapki_{name} {labels} in:\n{metrics}")


@pytest.mark.parametrize("hurt", ["none", "no-felix-cert", "felix-key-0644"])
def test_every_reader_agrees_with_check_on_one_state_root(
    tmp_path: Path,
    cfssl: CfsslServer,
    hostile_cfssl: Callable[..., HostileCfssl],
    hurt: str,
) -> None:
    out, state, env = _node(tmp_path, cfssl)
    elsewhere = Path(os.environ["TYPHAPKI_STATE_DIR"])  # the variable the file overrides
    issued = run_cli("issue", env=env)
    assert issued.returncode == 0, issued.stderr
    assert list((state / "signer-ca").iterdir()), "issue cached cfssl's CA elsewhere"
    damage(out, hurt)

    check = run_cli("check", env=env)
    fact_run = run_cli("facts", env=env)
    fact = json.loads(fact_run.stdout)["typhapki"]
    metrics = run_cli("metrics", env=env)
    nagios = run_cli("check", "--nagios", env=env)
    db = hostile_cfssl(_puppetdb(fact))
    fleet = run_cli("fleet", "--puppetdb", db.url, "--json", env=env)
    assert not (elsewhere / "signer-ca").exists(), "a reader used $TYPHAPKI_STATE_DIR"

    healthy = hurt == "none"
    why = (check.stdout, check.stderr, fact, metrics.stdout, nagios.stdout, fleet.stdout)
    assert check.returncode == (0 if healthy else 1), why
    assert fact["error"] is None and fact["ok"] is healthy, why
    assert fact["set"]["valid"] is healthy, why
    assert metrics.returncode == 0 and metrics.stderr == "", why
    for source in ("settings", "set", "ferm"):
        assert _series(metrics.stdout, "collect_error", source=source) == 0, why
    assert _series(metrics.stdout, "set_valid", cluster=CLUSTER) == healthy, why
    assert nagios.returncode == (0 if healthy else 2), why
    assert fleet.returncode == (0 if healthy else 1), why
    summary = json.loads(fleet.stdout)["clusters"]
    states = {n["state"] for c in summary for n in c["needs_action"]}
    assert states == (set() if healthy else {"invalid"}), why
    if healthy:  # one renewal moment, pki_renew_seconds included, in every report
        moment = re.search(r"renews typha at ([0-9TZ:-]+)", check.stdout)
        assert moment is not None, check.stdout
        typha = fact["set"]["roles"]["typha"]
        assert typha["renewal_due_at"] == moment[1]
        due = datetime.strptime(moment[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        metric = _series(metrics.stdout, "cert_renewal_due_timestamp_seconds", role="typha")
        assert int(metric) == due.timestamp()  # the fact and check print whole seconds
        # The 11-day window, the node's moment in its first half: not the last third of
        # cfssl's 365-day leaf.
        not_after = datetime.strptime(typha["not_after"], "%Y-%m-%dT%H:%M:%SZ")
        left = not_after.replace(tzinfo=UTC) - due
        assert 952200 / 2 < left.total_seconds() <= 952200, left


# A value for each option `check` takes from the node configuration, unlike the node's
# (a cfssl node, default identities, ECDSA P-256, cfssl's 365-day profiles, keys
# root's 0600). Some make the set wrong, some move its renewal, some are refused, some
# change nothing `check` judges: whichever, every reader must say what check says.
SAMPLES = [
    ("typha_cn", "typha-other"),
    ("felix_cn", "felix-other"),
    ("typha_uri_san", "spiffe://cluster.local/typha"),
    ("felix_uri_san", "spiffe://cluster.local/felix"),
    ("key_type", "ecdsa-p384"),
    ("days", "30"),
    ("typha_lifetime", "28d"),
    ("felix_lifetime", "24h"),
    ("renew_before", "300d"),
    ("renew_before", "400d"),  # longer than cfssl's 365-day profile: refused
    ("key_owner", "1"),
    ("key_group", "1"),
    ("key_mode", "0640"),
    ("node_name", "kubestage1002.eqiad.wmnet"),
    ("signer", "local"),
    ("cfssl_url", "http://127.0.0.1:9"),
    ("cfssl_auth_key", "{tmp}/missing/auth.key"),
    ("cfssl_auth_key_typha", "{tmp}/missing/typha.key"),
    ("cfssl_auth_key_felix", "{tmp}/missing/felix.key"),
    ("cfssl_ca_file", "{tmp}/missing/ca.pem"),
    ("cfssl_client_cert", "{tmp}/missing/client.pem"),
    ("cfssl_client_key", "{tmp}/missing/client.key"),
    ("cfssl_profile_typha", "felix"),
    ("cfssl_profile_felix", "typha"),
    ("cfssl_label", "discovery2026"),
    ("cfssl_timeout", "400"),
    ("cfssl_ca_ttl", "1s"),
    ("state_dir", "{tmp}/another-state"),  # written to: under the test's own directory
]
CHECKED = [o.name for o in options.COMMAND["check"].options if o in options.OPTIONS]


def test_every_option_check_takes_has_a_sample() -> None:
    named = {name for name, _ in SAMPLES}
    assert named == {n for n in CHECKED if not options.BY_NAME[n].flag_only}


def _verdicts(env: dict[str, str], hostile: Callable[..., HostileCfssl]) -> dict[str, Any]:
    """Each reader's word on the node: healthy or not, and its renewal moments."""
    check = run_cli("check", env=env)
    fact = json.loads(run_cli("facts", env=env).stdout)["typhapki"]
    metrics = run_cli("metrics", env=env)
    nagios = run_cli("check", "--nagios", env=env)
    fleet = run_cli("fleet", "--puppetdb", hostile(_puppetdb(fact)).url, "--json", env=env)
    errors = [_series(metrics.stdout, "collect_error", source=s) for s in ("settings", "set")]
    if check.returncode == 0:  # the renewal moment each one computed (node_name, renew_before)
        moment = re.search(r"renews typha at ([0-9TZ:-]+)", check.stdout)
        assert moment is not None, check.stdout
        due = datetime.strptime(moment[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        metric = _series(metrics.stdout, "cert_renewal_due_timestamp_seconds", role="typha")
        assert fact["set"]["roles"]["typha"]["renewal_due_at"] == moment[1], fact
        assert int(metric) == due.timestamp(), metrics.stdout
    return {
        "check": check.returncode == 0,
        "fact": fact["ok"] is True,
        "metrics": _series(metrics.stdout, "set_valid", cluster=CLUSTER) == 1 and not any(errors),
        "nagios": nagios.returncode == 0,
        "fleet": fleet.returncode == 0,
        "why": (check.stdout, check.stderr, fact.get("error"), metrics.stderr, nagios.stdout),
    }


@pytest.mark.parametrize(("name", "value"), SAMPLES)
def test_fact_metrics_nagios_and_fleet_agree_with_check_on_each_option(
    tmp_path: Path,
    cfssl: CfsslServer,
    hostile_cfssl: Callable[..., HostileCfssl],
    name: str,
    value: str,
) -> None:
    """One option at a time set in the node configuration, over a node issued without
    it: every reader that takes it sees it, and all agree with check."""
    env = _node(tmp_path, cfssl)[2]
    issued = run_cli("issue", env=env)
    assert issued.returncode == 0, issued.stderr
    config = Path(env["TYPHAPKI_CONFIG"])
    doc = yaml.safe_load(config.read_text())
    doc["defaults"][name] = value.format(tmp=tmp_path)
    config.write_text(yaml.safe_dump(doc))
    verdicts = _verdicts(env, hostile_cfssl)
    why = verdicts.pop("why")
    assert len(set(verdicts.values())) == 1, (name, verdicts, *why)
