"""The one judge of a hiera value (typhapki/inventory/hiera.py `judge_typha`): a refused
value stops only the commands whose reader reads it, `lint-hiera` lists every one, and
an error about a value of the Puppet module's copy of hiera names the hiera key.

The node's verdicts are those of the code each command runs: `resolve` for `issue` and
`check` (the certificates), the wiring's `resolve` for `manifests`, `load_cluster` for
`ferm` and `nft`. The Puppet module's generated types are held to the same table in
tests/puppet/test_module_types.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from typhapki import options
from typhapki.errors import ConfigError, TyphapkiError
from typhapki.firewall.pipeline import BOTH_TYPHAS
from typhapki.inventory import hiera
from typhapki.puppet.lint import lint
from typhapki.settings import wiring
from typhapki.settings.desired import Request, resolve
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import SignerOptions
from typhapki.typhaports import TLS_PORTS

CLUSTER = "lab"
KEY = f"kubernetes::clusters.main.{CLUSTER}"
# A value each key's rule refuses when hiera is read (typha: keys, then the cluster's).
BAD: dict[str, Any] = {
    "typha_cn": 7,
    "felix_cn": ["calico-node"],
    "typha_uri_san": {"a": 1},
    "felix_uri_san": 1.5,
    "key_type": 256,
    "days": 0,
    "typha_lifetime": [1],
    "felix_lifetime": True,
    "renew_before": {"d": 30},
    "key_owner": [0],
    "key_group": 1.0,
    "key_mode": ["0640"],
    "signer": "vault",
    "cfssl_url": 8888,
    "cfssl_profile_typha": "typha-tls",
    "cfssl_profile_felix": "felix.node",
    "cfssl_label": "discovery-2026",
    "trust": "not a list",
    "tls_stage": "retrie",
    "tls_min_version": "1.1",
    "tls_cipher_suites": "TLS_RSA_WITH_AES_128_CBC_SHA",
    "typha_address": "typha.example:99999",
    "port": 0,
    "mode": "loose",
    "style": "block",
    "networks": [],
    "network_variable": "NOT A VARIABLE",
    "prefix_v4": 1,
    "prefix_v6": 200,
    "ferm_output": "",
    "dns_gate": "off",
    "emergency": "contain",  # a mapping of step, new_ca and new_label
}
BAD_CLUSTER: dict[str, Any] = {
    "cluster_nodes": ["not a host!"],
    "control_plane_nodes": "kube1001",
    "ipv6dualstack": "yes",
    "pki_renew_seconds": 0,
}


def test_every_key_has_a_reader_and_a_refused_sample() -> None:
    assert set(BAD) == set(hiera.TYPHA_READERS)
    assert set(BAD_CLUSTER) == set(hiera.CLUSTER_READERS) - {"pki_intermediate_base"}
    assert set(hiera.TYPHA_READERS.values()) | set(hiera.CLUSTER_READERS.values()) == set(
        hiera.READERS
    )
    # The rule of the plain port is the firewall's: the stages where both Typhas run.
    assert tuple(hiera.SIDE_BY_SIDE) == tuple(BOTH_TYPHAS)


def _write(path: Path, typha: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    entry: dict[str, Any] = {"cluster_nodes": ["10.64.0.1"], **(cluster or {})}
    if typha:
        entry["typha"] = typha
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {CLUSTER: entry}}}))
    return path


def _refuses(check: Any) -> bool:
    try:
        check()
    except TyphapkiError:
        return True
    return False


def _verdicts(path: Path) -> dict[str, bool]:
    """Whether each reader's command refuses the hiera at `path`."""
    request = Request(
        path.parent / "out",
        "both",
        PkiOptions(node_name="kube1001.example"),
        SignerOptions(),
        hiera=path,
        cluster=CLUSTER,
    )
    typha = hiera.load_cluster(path, CLUSTER, reads=()).typha
    return {
        hiera.CERTS: _refuses(lambda: resolve(request, require_signer=False, ask_signer=False)),
        hiera.WIRING: _refuses(lambda: wiring.resolve(None, None, None, typha)),
        hiera.FIREWALL: _refuses(lambda: hiera.load_cluster(path, CLUSTER)),
    }


@settings(max_examples=50, deadline=None)
@given(
    bad=st.sets(st.sampled_from(sorted(BAD)), max_size=4),
    bad_cluster=st.sets(st.sampled_from(sorted(BAD_CLUSTER)), max_size=2),
)
def test_a_refused_value_stops_only_its_reader_and_lint_lists_each(
    tmp_path_factory: pytest.TempPathFactory, bad: set[str], bad_cluster: set[str]
) -> None:
    path = _write(
        tmp_path_factory.mktemp("h") / "h.yaml",
        {k: BAD[k] for k in bad},
        {k: BAD_CLUSTER[k] for k in bad_cluster},
    )
    readers = {hiera.TYPHA_READERS[k] for k in bad} | {
        hiera.CLUSTER_READERS[k] for k in bad_cluster
    }
    verdicts = _verdicts(path)
    # ferm and nft read every key (the identity of the mTLS proof included): any refusal.
    assert verdicts == {
        hiera.CERTS: hiera.CERTS in readers,
        hiera.WIRING: hiera.WIRING in readers,
        hiera.FIREWALL: bool(readers),
    }
    report = lint([path], offline=True)
    listed = sorted(f.key_path for f in report.findings)
    # One finding per refused value, all of them in one run, each at its key.
    assert listed == sorted(
        [f"{KEY}.typha.{k}" for k in bad]
        + [f"{KEY}.{k}[0]" if k == "cluster_nodes" else f"{KEY}.{k}" for k in bad_cluster]
    )


@settings(max_examples=50, deadline=None)
@given(
    stage=st.sampled_from([None, *options.BY_NAME["tls_stage"].choices]),
    port=st.sampled_from([5473, TLS_PORTS.server, 5475, 65535]),
)
def test_the_plain_port_beside_the_tls_typha_lint_equals_the_firewall(
    tmp_path_factory: pytest.TempPathFactory, stage: str | None, port: int
) -> None:
    typha: dict[str, Any] = {"port": port} | ({"tls_stage": stage} if stage else {})
    path = _write(tmp_path_factory.mktemp("p") / "h.yaml", typha)
    firewall = _refuses(lambda: hiera.load_cluster(path, CLUSTER))
    assert firewall == (stage in BOTH_TYPHAS and port == TLS_PORTS.server)
    assert (not lint([path], offline=True).ok) == firewall
    assert not _verdicts(path)[hiera.CERTS]  # the certificates never read the port


def test_a_wiring_typo_renews_and_stops_only_manifests(tmp_path: Path) -> None:
    """The command of issue 37: `tls_stage: retrie` in hiera used to make `issue` exit 2
    on every node."""
    h = _write(tmp_path / "h.yaml", {"tls_stage": "retrie"})
    assert run_cli("ca", "init", "--ca-dir", tmp_path / "ca").returncode == 0
    common = ("--out", tmp_path / "out", "--hiera", h, "--cluster", CLUSTER)
    issued = run_cli("issue", "--ca-dir", tmp_path / "ca", *common)
    assert issued.returncode == 0, issued.stderr
    assert run_cli("check", "--ca-dir", tmp_path / "ca", *common).returncode == 0
    wired = run_cli("manifests", "--wiring", *common)
    assert wired.returncode == 2
    assert f"{KEY}.typha.tls_stage" in wired.stderr and "'retrie'" in wired.stderr
    assert len(wired.stderr.strip().splitlines()) == 1
    linted = run_cli("lint-hiera", "--offline", h)
    assert linted.returncode == 1 and f"{KEY}.typha.tls_stage" in linted.stdout


def test_a_copy_of_hiera_names_the_hiera_key_not_its_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "cluster.yaml", {"tls_stage": "retrie", "port": 0})
    path.write_text(f"{hiera.COPY_MARK} of the Puppet server\n{path.read_text()}")
    with pytest.raises(ConfigError) as err:
        hiera.load_cluster(path, CLUSTER)
    assert str(err.value).startswith(f"{KEY}.typha.")
    assert str(path) not in str(err.value) and "cluster.yaml" not in str(err.value)
    # The Puppet module writes its copy with the mark as its first line.
    template = Path(__file__).parents[2] / "puppet/typhapki/templates/cluster.yaml.epp"
    lines = template.read_text().splitlines()
    assert lines[1].startswith(hiera.COPY_MARK), lines[:2]
    # Hand-written hiera keeps its file and line.
    plain = _write(tmp_path / "plain.yaml", {"tls_stage": "retrie"})
    with pytest.raises(ConfigError, match=rf"^{plain}:\d+: {KEY}\.typha\.tls_stage"):
        hiera.load_cluster(plain, CLUSTER)


def test_the_stages_hiera_accepts_are_the_wirings() -> None:
    """The judge takes `tls_stage` from the option table, the Puppet types from
    wiring.py's Stage (typhapki/cli/docgen.py): the two must name the same stages."""
    from typhapki.settings.wiring import Stage

    assert options.BY_NAME["tls_stage"].choices == tuple(s.value for s in Stage)


def _ca_pem(tmp_path: Path) -> str:
    ca = tmp_path / "ca"
    assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    return (ca / "typhaca.crt").read_text()


def test_the_emergency_is_judged_key_by_key(tmp_path: Path) -> None:
    """typha.emergency (docs/rotation.md, "Emergency: the CA key is stolen"): each of
    its keys refused naming the key, by ferm/nft as by `issue` (a refused emergency
    must never leave the relaxed rule open), and accepted as one Emergency."""
    pem = _ca_pem(tmp_path)
    leaf_like = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    cases: list[tuple[Any, str | None]] = [
        ({"step": "contain"}, None),
        ({"step": "trust", "new_ca": pem}, None),
        ({"step": "typha-leaf", "new_ca": pem, "new_label": "lab2026"}, None),
        ({"step": "now"}, "typha.emergency.step: expected one of contain, trust"),
        ({"step": "trust"}, "typha.emergency: step trust needs new_ca"),
        ({"step": "trust", "new_ca": leaf_like}, "typha.emergency.new_ca"),
        ({"step": "contain", "new_label": "lab-2026"}, "typha.emergency.new_label: cfssl"),
        ({"step": "contain", "stepp": 1}, "typha.emergency.stepp: unknown key"),
        ({"new_ca": pem}, "typha.emergency: needs step"),
        ("contain", "typha.emergency: expected a mapping"),
    ]
    for value, refused in cases:
        path = _write(tmp_path / "h.yaml", {"emergency": value, "mode": "relaxed"})
        verdicts = _verdicts(path)
        assert verdicts[hiera.FIREWALL] == verdicts[hiera.CERTS] == (refused is not None)
        if refused is None:
            emergency = hiera.load_cluster(path, CLUSTER).typha.emergency
            assert emergency is not None and emergency.step == value["step"]
            assert emergency.new_ca == value.get("new_ca")
            continue
        with pytest.raises(ConfigError) as caught:
            hiera.load_cluster(path, CLUSTER)
        assert refused in str(caught.value), str(caught.value)
        assert "Traceback" not in str(caught.value)


def test_lint_judges_the_emergency_as_the_nodes_do(tmp_path: Path) -> None:
    """lint-hiera at every step: a local CA cluster passes (its nodes name the new CA's
    directory), a cfssl cluster is refused from the first step the new CA signs while
    hiera names no new_label, as `issue` refuses it; typha-leaf's two signers are no
    refusal of their own."""
    pem = _ca_pem(tmp_path)
    cfssl = {"signer": "cfssl", "cfssl_url": "https://pki.example:8888"}
    for step in ("contain", "trust", "typha-leaf", "felix-leaf", "drop", "done"):
        emergency = {"step": step, **({"new_ca": pem} if step != "contain" else {})}
        local = _write(tmp_path / "local.yaml", {"emergency": emergency})
        assert lint([local], offline=True).ok, step
        labelled = {**emergency, "new_label": "lab2026"}
        named = _write(tmp_path / "named.yaml", {**cfssl, "emergency": labelled})
        assert lint([named], offline=True).ok, step
        unnamed = _write(tmp_path / "unnamed.yaml", {**cfssl, "emergency": emergency})
        report = lint([unnamed], offline=True)
        signs_new = step not in ("contain", "trust")
        assert report.ok != signs_new, (step, [f.message for f in report.findings])
        if signs_new:
            assert "needs new_label" in report.findings[0].message
