"""`typhapki probe` follows the live switch's stage and proves the TLS policy.

The Typha is tests/peers/typhaserver playing a Calico release (`-calico-version`):
3.32 reads TLS_MIN_VERSION and TLS_CIPHER_SUITES, 3.31 only the suites, 3.30 neither
(docs/kubernetes.md, "The TLS policy"). The policy comes from the cluster's hiera, as on
a node the Puppet module configures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.support import gopeers
from tests.support.gopeers import GoPeers, typha_env, typha_server
from typhapki.kubernetes import typhatarget
from typhapki.kubernetes.typhatarget import PLAIN_LABELS, typha_target
from typhapki.settings.wiring import LIVE_STAGES, Stage
from typhapki.typhaports import DEFAULT_PORTS, TLS_LABELS, TLS_PORTS, Ports

go_peers = gopeers.go_peers

SUITE = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"  # the issued set's keys are ECDSA P-256


def hiera(path: Path, **typha: str) -> Path:
    lines = "".join(f"        {k}: {v}\n" for k, v in typha.items()) or "        {}\n"
    path.write_text(
        "kubernetes::clusters:\n  main:\n    c1:\n      dc: eqiad\n"
        "      cluster_nodes: [node1.example.org]\n"
        f"      typha:\n{lines}"
    )
    return path


def test_each_stage_selects_its_typha() -> None:
    """No stage: the plain Typha, as before the switch; every stage: the TLS Typha's
    label and port, from typhapki/typhaports.py."""
    plain = typha_target(None)
    assert dict([plain.label]) == PLAIN_LABELS and plain.port == DEFAULT_PORTS.server == 5473
    assert plain.selector == "k8s-app=calico-typha"
    # all-at-once runs one Typha, switched with Felix: the plain Typha's label and port.
    assert typha_target(Stage.ALL_AT_ONCE) == plain
    for stage in LIVE_STAGES:
        tls = typha_target(stage)
        assert dict([tls.label]) == TLS_LABELS and tls.port == TLS_PORTS.server
        assert tls.local_address == f"127.0.0.1:{TLS_PORTS.server}" and tls.tls_typha


# (release, policy in hiera) -> the probe's verdict: None passes, else the words of its error.
CASES = {
    ("3.32", "min"): None,
    ("3.31", "min"): "Typha accepted a TLS 1.2 client",
    ("3.30", "min"): "Typha accepted a TLS 1.2 client",
    ("3.31", "suites"): None,
    ("3.30", "suites"): "Typha accepted TLS 1.2 suite TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ("3.32", "both"): None,
    ("3.31", "both"): "Typha accepted a TLS 1.2 client",
}


@pytest.mark.parametrize(("release", "what"), list(CASES))
def test_the_policy_is_proven_never_assumed(
    go_peers: GoPeers, issued: Path, tmp_path: Path, release: str, what: str
) -> None:
    """A Typha that ignores the policy (a release before the variable exists) is
    reported `policy unenforced`, exit 1, though it serves the certificate on disk; one
    that enforces it passes, saying what it refused."""
    policy = {"min": {"tls_min_version": "'1.3'"}, "suites": {"tls_cipher_suites": SUITE},
              "both": {"tls_min_version": "'1.3'", "tls_cipher_suites": SUITE}}[what]  # fmt: skip
    env = {**typha_env(issued), "TLS_MIN_VERSION": "1.3", "TLS_CIPHER_SUITES": SUITE}
    if what == "suites":
        del env["TLS_MIN_VERSION"]
    hiera_file = hiera(tmp_path / "h.yaml", **policy)
    args = ("-calico-version", release)
    with typha_server(go_peers, env, conns=20, args=args) as server:
        address = f"127.0.0.1:{server.port}"
        result = run_cli("probe", "--address", address, "--out", issued,
                         "--hiera", hiera_file, "--cluster", "c1")  # fmt: skip
        as_json = run_cli("probe", "--address", address, "--out", issued, "--json",
                          "--hiera", hiera_file, "--cluster", "c1")  # fmt: skip
    expected = CASES[(release, what)]
    if expected is None:
        assert result.returncode == 0, (result.stdout, result.stderr)
        assert "the certificate on disk" in result.stdout
        assert "enforces the TLS policy" in result.stdout and "refused" in result.stdout
        assert json.loads(as_json.stdout)["policy"]["enforced"] is True
        return
    assert_one_line_error(result, 1, "policy unenforced", expected)
    assert as_json.returncode == 1
    found = json.loads(as_json.stdout)
    assert found["serves_disk_certificate"] is True  # the certificate alone would pass
    assert found["policy"]["enforced"] is False and expected in found["policy"]["error"]


def test_no_policy_no_extra_handshake(go_peers: GoPeers, issued: Path, tmp_path: Path) -> None:
    """Without a policy the probe makes its one handshake (Typha takes exactly one)."""
    with typha_server(go_peers, typha_env(issued), conns=1) as server:
        result = run_cli("probe", "--address", f"127.0.0.1:{server.port}", "--out", issued,
                         "--hiera", hiera(tmp_path / "h.yaml"), "--cluster", "c1")  # fmt: skip
        assert len(server.finish().lines) == 1
    assert result.returncode == 0 and "TLS policy" not in result.stdout, result.stdout


@pytest.mark.parametrize("stage", [None, *LIVE_STAGES])
def test_without_address_the_probe_dials_the_stage_typha(
    go_peers: GoPeers,
    issued: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stage: Stage | None,
) -> None:
    """No --address: the TLS Typha's port in every stage, the plain one's without one.
    In parallel the plain Typha still runs plain on its port: it is never dialled as a
    failed TLS Typha. (The ports are moved to ephemeral ones so that no other Typha on
    the machine's loopback can answer; the command is called in this process for it.)"""
    from tests.support.mtlspeers import go_typha
    from typhapki.commands.probe import probe
    from typhapki.errors import NeedsActionError
    from typhapki.settings.pki import PkiOptions

    typha = {"tls_stage": stage.value} if stage is not None else {}
    hiera_file = hiera(tmp_path / "h.yaml", **typha)
    with (
        go_typha(go_peers, issued, "verify") as tls,
        go_typha(go_peers, issued, "plain") as plain,
    ):
        tls_port, plain_port = int(tls.rsplit(":", 1)[1]), int(plain.rsplit(":", 1)[1])
        monkeypatch.setattr(typhatarget, "TLS_PORTS", Ports(tls_port, 1, 2))
        monkeypatch.setattr(typhatarget, "DEFAULT_PORTS", Ports(plain_port, 1, 2))
        if stage is None:
            # Before any switch the plain Typha is the one: a plain one fails loudly.
            with pytest.raises(NeedsActionError, match=plain):
                probe(None, issued, PkiOptions(), hiera_file, "c1", 5.0, False)
            return
        assert probe(None, issued, PkiOptions(), hiera_file, "c1", 5.0, False) == 0
    assert capsys.readouterr().out.startswith(f"{tls}: Typha serves")


def test_the_plain_typha_named_in_parallel_is_explained(
    go_peers: GoPeers, issued: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked for the plain Typha's port in parallel, the probe fails (it is no TLS
    Typha) and says why: the plain Typha runs without TLS by design, the TLS one is on
    its own port. (Called in this process: the plain port is moved to an ephemeral one.)"""
    from tests.support.mtlspeers import go_typha
    from typhapki.commands.probe import probe
    from typhapki.errors import NeedsActionError
    from typhapki.settings.pki import PkiOptions

    hiera_file = hiera(tmp_path / "h.yaml", tls_stage="parallel")
    with go_typha(go_peers, issued, "plain") as plain:
        port = int(plain.rsplit(":", 1)[1])
        monkeypatch.setattr(typhatarget, "DEFAULT_PORTS", Ports(port, 1, 2))
        with pytest.raises(NeedsActionError) as refused:
            probe(plain, issued, PkiOptions(), hiera_file, "c1", 5.0, False)
    text = str(refused.value)
    assert "parallel stage" in text and "runs without TLS" in text
    assert f"127.0.0.1:{TLS_PORTS.server}" in text


# A Typha that enforces the whole policy (Calico 3.32), behind a front that drops what
# it should refuse: how (a FIN or a RST) and which connections.
DROPPING = {
    "shed, FIN": ("shed", False),
    "shed, RST": ("shed", True),
    "picky, RST": ("picky", True),
    "picky, FIN": ("picky", False),
}


@pytest.mark.parametrize("how", list(DROPPING))
def test_a_typha_that_drops_connections_proves_no_policy(
    go_peers: GoPeers, issued: Path, tmp_path: Path, how: str
) -> None:
    """A connection closed or reset before Typha answered is no refusal: a Typha that
    accepted this node's Felix and then sheds every connection (or a front that drops
    every TLS 1.2 offer without an alert) leaves the policy "not proven", exit 1, one
    line saying Typha closed the connection before answering; never "enforces". The
    same Typha reached directly refuses the offers with alerts: the policy is proven
    (test_the_policy_is_proven_never_assumed)."""
    from tests.support.mtlspeers import go_typha, picky_typha, shedding_typha

    front, reset = DROPPING[how]
    policy = {"tls_min_version": "'1.3'", "tls_cipher_suites": SUITE}
    hiera_file = hiera(tmp_path / "h.yaml", **policy)
    env = {"TLS_MIN_VERSION": "1.3", "TLS_CIPHER_SUITES": SUITE}
    with go_typha(go_peers, issued, "verify", **env) as typha:
        dropping = (
            shedding_typha(typha, reset=reset)
            if front == "shed"
            else picky_typha(typha, reset=reset)
        )
        with dropping as address:
            result = run_cli("probe", "--address", address, "--out", issued, "--json",
                             "--hiera", hiera_file, "--cluster", "c1")  # fmt: skip
    found = json.loads(result.stdout)
    assert found["serves_disk_certificate"] is True
    assert found["policy"]["enforced"] is None, found["policy"]
    words = "reset the connection" if reset else "closed the connection"
    assert words in found["policy"]["error"] and "without an alert" in found["policy"]["error"]
    assert "before answering" in found["policy"]["error"]
    assert_one_line_error(result, 1, "TLS policy not proven", words, "offered")


RECORD = st.tuples(st.sampled_from([20, 21, 22, 23, 99]), st.binary(max_size=12))


@settings(max_examples=50, deadline=None)
@given(records=st.lists(RECORD, max_size=5), cut=st.integers(0, 80))
def test_only_an_alert_in_the_plaintext_flight_is_read(
    records: list[tuple[int, bytes]], cut: int
) -> None:
    """The refusal read from Typha's first flight is the first alert among its handshake
    records, before anything else (a ChangeCipherSpec: the rest is encrypted); a cut or
    garbled flight gives none, never an exception."""
    from typhapki.monitoring.probe import _first_alert

    wire = b"".join(bytes([kind, 3, 3]) + len(body).to_bytes(2, "big") + body
                    for kind, body in records)  # fmt: skip
    expected = None
    for kind, body in records:
        if kind == 21:
            expected = body[1] if len(body) >= 2 else None
        if kind != 22:
            break
    assert _first_alert(wire) == expected
    _first_alert(wire[:cut])  # never raises
