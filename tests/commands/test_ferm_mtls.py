"""`typhapki ferm` writes a relaxed rule only where Typha is proven to enforce mTLS
(issue 20, docs/ferm.md "The mTLS proof"), against real Typhas: the Go peer in its
three modes, openssl s_server, nothing listening and a handshake that hangs."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliResult, assert_one_line_error, run_cli
from tests.support.gopeers import GoPeers, go_peers
from tests.support.mtlspeers import (
    closed_port,
    go_typha,
    hanging_typha,
    openssl_typha,
    split_typha,
)
from typhapki.kubernetes.typhaports import TLS_PORTS

__all__ = ["go_peers"]

HIERA = """\
kubernetes::clusters:
  main:
    lab:
      cluster_nodes: [10.250.1.1, 10.250.2.2]
      typha:
        mode: relaxed
        networks: [10.250.0.0/16]
"""
OLD_RULE = b"# the last rule, strict, written by hand\n"


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    (tmp_path / "hiera.yaml").write_text(HIERA)
    (tmp_path / "rule").write_bytes(OLD_RULE)
    return tmp_path


def ferm(lab: Path, out: Path, port: int, *args: str | Path, **kw: Any) -> CliResult:
    return run_cli(
        "ferm", "--hiera", lab / "hiera.yaml", "--cluster", "lab", "--output", lab / "rule",
        "--out", out, "--state-dir", lab / "state", "--port", str(port),
        "--proof-timeout", "2", *args, **kw,
    )  # fmt: skip


def state(lab: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((lab / "state" / "ferm.json").read_text())
    return data


def facts(lab: Path) -> dict[str, Any]:
    """The fact's ferm_gate: what PuppetDB sees of the proof."""
    result = run_cli("facts", "--out", lab / "none", "--state-dir", lab / "state")
    gate: dict[str, Any] = json.loads(result.stdout)["typhapki"]["ferm_gate"]
    assert not any(isinstance(v, str) and v.endswith("Z") for k, v in gate.items() if "mtls" in k)
    return gate


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


@contextmanager
def nothing(peers: GoPeers, out: Path) -> Iterator[str]:
    with closed_port() as port:
        yield f"127.0.0.1:{port}"


Server = Callable[[GoPeers, Path], AbstractContextManager[str]]
# name: (server as the local Typha, written?, words of the one line when refused)
CASES: dict[str, tuple[Server, bool, str]] = {
    "go verify": (lambda p, o: go_typha(p, o, "verify"), True, ""),
    "go no-client-cert": (
        lambda p, o: go_typha(p, o, "no-client-cert"),
        False,
        "accepted a TLS client without a certificate",
    ),
    "go plain": (lambda p, o: go_typha(p, o, "plain"), False, "speaks plain TCP"),
    "openssl -Verify": (
        lambda p, o: openssl_typha(o, "-Verify", "1", "-verify_return_error"),
        True,
        "",
    ),
    "openssl -verify": (
        lambda p, o: openssl_typha(o, "-verify", "1", "-verify_return_error"),
        False,
        "accepted a TLS client without a certificate",
    ),
    "nothing listening": (nothing, False, "no fresh proof"),
    # TLS 1.3 only (TLS_MIN_VERSION=1.3): proven under TLS 1.3, so the relaxed rule is open
    # to it; one that takes a client without a certificate under TLS 1.3 is not.
    "go verify, TLS 1.3 only": (
        lambda p, o: go_typha(p, o, "verify", TLS_MIN_VERSION="1.3"),
        True,
        "",
    ),
    "openssl -Verify, TLS 1.3 only": (
        lambda p, o: openssl_typha(o, "-tls1_3", "-Verify", "1", "-verify_return_error"),
        True,
        "",
    ),
    "go no-client-cert, TLS 1.3 only": (
        lambda p, o: go_typha(p, o, "no-client-cert", TLS_MIN_VERSION="1.3"),
        False,
        "accepted a TLS client without a certificate under TLS 1.3",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_typha_gets_the_rule_it_should(
    go_peers: GoPeers, issued: Path, lab: Path, name: str
) -> None:
    server, written, words = CASES[name]
    with server(go_peers, issued) as address:
        result = ferm(lab, issued, port_of(address))
    rule = (lab / "rule").read_bytes()
    recorded = state(lab)
    if written:
        assert result.returncode == 0, result.stderr
        assert b"mode relaxed" in rule and b"10.250.0.0/16" in rule
        assert recorded["mtls_verdict"] == "enforced"
        assert recorded["mtls_proof_expires"] == recorded["mtls_proven_at"] + 21600
        return
    assert result.returncode == 1, result
    assert rule == OLD_RULE  # byte for byte
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("typhapki: mTLS proof: "), lines
    assert words in lines[0] and "the last rule stays" in lines[0]
    assert recorded["mtls_proven_at"] is None and recorded["last_success"] is None
    assert recorded["mtls_verdict"] == (
        "unknown" if name == "nothing listening" else "not_enforced"
    )


def test_a_proof_outlives_a_typha_restart_but_not_its_lifetime(
    go_peers: GoPeers, issued: Path, lab: Path
) -> None:
    """Proven through the node configuration's typha_address (nothing listens here),
    then Typha is gone: the proven rule stays written until the proof expires, and is
    never dropped back; a Typha seen accepting strangers voids the proof at once."""
    config = lab / "typhapki.yaml"
    env = {"TYPHAPKI_CONFIG": str(config)}
    with closed_port() as local:
        with go_typha(go_peers, issued, "verify") as address:
            config.write_text(f"commands:\n  ferm:\n    typha_address: {address}\n")
            proven = ferm(lab, issued, local, env=env)
        assert proven.returncode == 0, proven.stderr
        rule = (lab / "rule").read_bytes()
        first = state(lab)

        assert facts(lab)["mtls_enforced"] is True
        gone = ferm(lab, issued, local, env=env)  # the replica restarts elsewhere
        assert gone.returncode == 0, gone.stderr
        assert "typhapki: warning: mTLS proof: " in gone.stderr and "holds until" in gone.stderr
        assert (lab / "rule").read_bytes() == rule
        after = state(lab)
        assert after["mtls_proven_at"] == first["mtls_proven_at"]
        assert after["mtls_verdict"] == "unknown"

        # The proof expires: the relaxed rule stays as it is (exit 1), never strict.
        after["mtls_proof_expires"] = int(time.time()) - 1
        (lab / "state" / "ferm.json").write_text(json.dumps(after))
        expired = ferm(lab, issued, local, env=env)
        assert expired.returncode == 1 and "no fresh proof" in expired.stderr
        assert (lab / "rule").read_bytes() == rule
        assert state(lab)["mtls_proven_at"] == first["mtls_proven_at"]  # for the metrics
        assert facts(lab)["mtls_enforced"] == "unknown"

        # Fresh again (the flag, this time), then a chart upgrade drops the TLS variables.
        with go_typha(go_peers, issued, "verify") as address:
            assert ferm(lab, issued, local, "--typha-address", address).returncode == 0
        assert (lab / "rule").read_bytes() == rule
        with go_typha(go_peers, issued, "no-client-cert") as address:
            dropped = ferm(lab, issued, local, "--typha-address", address, "--check")
        assert dropped.returncode == 1 and "without a certificate" in dropped.stderr
        assert state(lab)["mtls_verdict"] == "not_enforced"
        assert state(lab)["mtls_proven_at"] is None
        assert (lab / "rule").read_bytes() == rule
        assert facts(lab)["mtls_enforced"] is False


def test_the_cluster_typha_from_hiera(go_peers: GoPeers, issued: Path, lab: Path) -> None:
    hiera = lab / "hiera.yaml"
    with closed_port() as local, go_typha(go_peers, issued, "plain") as address:
        hiera.write_text(HIERA + f"        typha_address: '{address}'\n")
        result = ferm(lab, issued, local)
    assert result.returncode == 1 and f"Typha at {address} speaks plain TCP" in result.stderr
    assert (lab / "rule").read_bytes() == OLD_RULE
    hiera.write_text(HIERA + "        typha_address: 'a b:1'\n")
    assert_one_line_error(ferm(lab, issued, 5473), 2, "typha.typha_address", "HOST:PORT")


def test_a_hanging_handshake_is_bounded(issued: Path, lab: Path) -> None:
    with hanging_typha() as address:
        started = time.monotonic()
        result = ferm(lab, issued, port_of(address), "--proof-timeout", "1")
        took = time.monotonic() - started
    assert result.returncode == 1 and "no answer" in result.stderr, result
    assert (lab / "rule").read_bytes() == OLD_RULE
    assert took < 15, took  # one probe of 1 s, plus a process start


def test_skipping_is_a_flag_only(issued: Path, lab: Path) -> None:
    with closed_port() as port:
        skipped = ferm(lab, issued, port, "--skip-mtls-proof")
        assert skipped.returncode == 0, skipped.stderr
        assert "--skip-mtls-proof" in skipped.stderr and "unproven" in skipped.stderr
        assert b"mode relaxed" in (lab / "rule").read_bytes()
        assert state(lab)["mtls_proof_skipped"] is True
        assert state(lab)["mtls_proven_at"] is None

        config = lab / "typhapki.yaml"
        for text, key in (
            ("commands:\n  ferm:\n    skip_mtls_proof: 'true'\n", "commands.ferm.skip_mtls_proof"),
            ("defaults:\n  skip-mtls-proof: 'true'\n", "defaults.skip-mtls-proof"),
        ):
            config.write_text(text)
            refused = ferm(lab, issued, port, env={"TYPHAPKI_CONFIG": str(config)})
            assert_one_line_error(refused, 2, str(config), key, "flag only")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--typha-address", "a:b:c"), "--typha-address"),
        (("--proof-lifetime", "0"), "--proof-lifetime"),
        (("--proof-timeout", "0"), "--proof-timeout"),
    ],
)
def test_bad_proof_options_exit_2(
    issued: Path, lab: Path, args: tuple[str, ...], words: str
) -> None:
    assert_one_line_error(ferm(lab, issued, 5473, *args), 2, words)
    assert (lab / "rule").read_bytes() == OLD_RULE


def test_a_relaxed_rule_to_write_needs_the_felix_set(lab: Path) -> None:
    result = run_cli(
        "ferm", "--hiera", lab / "hiera.yaml", "--cluster", "lab", "--output", lab / "rule",
    )  # fmt: skip
    assert_one_line_error(result, 2, "--out", "mTLS proof")
    assert (lab / "rule").read_bytes() == OLD_RULE


@pytest.mark.parametrize("mode", ["verify", "no-client-cert"])
def test_nft_takes_the_same_proof(go_peers: GoPeers, issued: Path, lab: Path, mode: str) -> None:
    """The proof sits in the pipeline both renderers share (firewall/pipeline.py gated_rule)."""
    with go_typha(go_peers, issued, mode) as address:
        result = run_cli(
            "nft", "--hiera", lab / "hiera.yaml", "--cluster", "lab", "--output", lab / "rule",
            "--out", issued, "--state-dir", lab / "state", "--port", str(port_of(address)),
            "--proof-timeout", "2",
        )  # fmt: skip
    rule = (lab / "rule").read_bytes()
    if mode == "verify":
        assert result.returncode == 0, result.stderr
        assert b"10.250.0.0/16" in rule and b"calico_typha_v4" in rule
        assert state(lab)["mtls_verdict"] == "enforced"
    else:
        assert result.returncode == 1, result
        assert "accepted a TLS client without a certificate" in result.stderr
        assert rule == OLD_RULE  # byte for byte


def test_a_typha_open_under_tls13_voids_the_proof_for_good(
    go_peers: GoPeers, issued: Path, lab: Path
) -> None:
    """issue 30, class 6: proven, then the same address enforces mTLS under TLS 1.2
    only and takes a client without a certificate under TLS 1.3. The proof is void: the
    relaxed rule is not written, and when Typha then cannot be reached, the relaxed
    rule is not kept on the earlier proof either."""
    with closed_port() as local:
        with go_typha(go_peers, issued, "verify") as address:
            assert ferm(lab, issued, local, "--typha-address", address).returncode == 0
        assert state(lab)["mtls_verdict"] == "enforced"
        (lab / "rule").write_bytes(OLD_RULE)  # to see that nothing is written below

        open13 = openssl_typha(issued, "-verify", "1", "-tls1_3")
        strict12 = openssl_typha(issued, "-Verify", "1", "-verify_return_error", "-tls1_2")
        with strict12 as old, open13 as new, split_typha(old, new) as address:
            seen = ferm(lab, issued, local, "--typha-address", address)
        assert seen.returncode == 1, seen
        lines = seen.stderr.splitlines()
        assert len(lines) == 1 and "without a certificate under TLS 1.3" in lines[0], lines
        assert (lab / "rule").read_bytes() == OLD_RULE
        assert state(lab)["mtls_verdict"] == "not_enforced"
        assert state(lab)["mtls_proven_at"] is None
        assert facts(lab)["mtls_enforced"] is False

        gone = ferm(lab, issued, local)  # nothing listens, no --typha-address
        assert gone.returncode == 1 and "no fresh proof" in gone.stderr, gone
        assert (lab / "rule").read_bytes() == OLD_RULE


def staged(lab: Path, stage: str, more: str = "") -> None:
    (lab / "hiera.yaml").write_text(HIERA + f"        tls_stage: {stage}\n" + more)


def test_retire_proves_the_tls_typha_and_opens_only_its_port(
    go_peers: GoPeers, issued: Path, lab: Path
) -> None:
    """issue 32: at tls_stage retire the relaxed rule opens the TLS Typha's port alone,
    and its proof is against that Typha: the plain Typha on the plain port (--port)
    enforces nothing, which refuses the relaxed rule in no stage but none."""
    with socket.socket() as held:  # nothing may answer locally on the TLS port
        try:
            held.bind(("127.0.0.1", TLS_PORTS.server))
        except OSError:
            pytest.skip(f"127.0.0.1:{TLS_PORTS.server} is taken on this machine")
        with (
            go_typha(go_peers, issued, "plain") as plain,
            go_typha(go_peers, issued, "verify") as tls,
        ):
            refused = ferm(lab, issued, port_of(plain), "--typha-address", tls)
            staged(lab, "retire")
            retired = ferm(lab, issued, port_of(plain), "--typha-address", tls)
    assert refused.returncode == 1 and "speaks plain TCP" in refused.stderr, refused
    assert retired.returncode == 0, retired.stderr
    assert state(lab)["mtls_verdict"] == "enforced"
    rule = (lab / "rule").read_text()
    assert (
        f"tcp/{TLS_PORTS.server}) for cluster lab (group main), mode relaxed, tls_stage retire"
        in rule
    )
    assert f"dport {TLS_PORTS.server} saddr" in rule and "dport 5473" not in rule
    assert f"dport {port_of(plain)}" not in rule


@pytest.mark.parametrize(("stage", "gate"), [("parallel", "warn"), ("switch", "enforce")])
def test_both_typhas_get_the_strict_rule_without_a_proof(lab: Path, stage: str, gate: str) -> None:
    """While the plain Typha runs beside the TLS one, hiera's mode: relaxed waits, and the
    warn gate of its fixed networks with it: both ports get the node addresses behind the
    enforced gate, no proof is tried (none is needed), one warning says so."""
    staged(lab, stage, f"        dns_gate: {gate}\n")
    result = run_cli(
        "ferm", "--hiera", lab / "hiera.yaml", "--cluster", "lab", "--output", lab / "rule",
        "--state-dir", lab / "state",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("typhapki: warning: cluster lab: "), lines
    assert f"tcp/5473 and tcp/{TLS_PORTS.server} get the strict rule" in lines[0]
    waits = "mode relaxed and dns_gate warn wait" if gate == "warn" else "mode relaxed waits"
    assert lines[0].endswith(f"{waits} for retire"), lines[0]
    assert "hiera.yaml:" in lines[0]  # where tls_stage was written
    rule = (lab / "rule").read_text()
    for port in (5473, TLS_PORTS.server):
        assert f"(tcp/{port}) for cluster lab (group main), mode strict, tls_stage {stage}" in rule
        assert (
            f"proto tcp dport {port} saddr (\n        10.250.1.1\n        10.250.2.2\n    )" in rule
        )
    assert "10.250.0.0/16" not in rule and state(lab)["mtls_verdict"] is None
    assert state(lab)["dns_gate"] == "enforce"
    clash = run_cli(
        "ferm", "--hiera", lab / "hiera.yaml", "--cluster", "lab", "--port", str(TLS_PORTS.server),
    )  # fmt: skip
    assert_one_line_error(clash, 2, "--port", "the TLS Typha's server port", stage)
    # A relaxed rule of fixed networks needs no cluster_nodes; the strict rule does.
    nodes = "      cluster_nodes: [10.250.1.1, 10.250.2.2]\n"
    (lab / "hiera.yaml").write_text(HIERA.replace(nodes, "") + f"        tls_stage: {stage}\n")
    nodeless = run_cli("ferm", "--hiera", lab / "hiera.yaml", "--cluster", "lab")
    assert_one_line_error(
        nodeless, 2, "no cluster_nodes", f"tls_stage {stage} makes the rule strict"
    )


def test_a_proof_of_another_port_proves_nothing_at_retire(
    go_peers: GoPeers, issued: Path, lab: Path
) -> None:
    """The proof is of the Typha on the port the relaxed rule opened: one made before the
    switch (the --port Typha) does not hold for the TLS Typha at retire, even fresh."""
    with socket.socket() as held, closed_port() as local:
        try:
            held.bind(("127.0.0.1", TLS_PORTS.server))
        except OSError:
            pytest.skip(f"127.0.0.1:{TLS_PORTS.server} is taken on this machine")
        with go_typha(go_peers, issued, "verify") as address:
            proven = ferm(lab, issued, local, "--typha-address", address)
        assert proven.returncode == 0, proven.stderr
        assert state(lab)["mtls_proven_port"] == local
        rule = (lab / "rule").read_bytes()
        staged(lab, "retire")
        retired = ferm(lab, issued, local)  # nothing answers on the TLS port
    assert retired.returncode == 1 and "no fresh proof" in retired.stderr, retired
    assert "holds until" not in retired.stderr
    assert (lab / "rule").read_bytes() == rule
    assert state(lab)["mtls_proven_port"] == TLS_PORTS.server
