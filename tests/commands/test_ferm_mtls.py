"""`typhapki ferm` writes a relaxed rule only where Typha is proven to enforce mTLS
(issue 20, docs/ferm.md "The mTLS proof"), and the strict rule where Typha is proven
not to (issue 37), against real Typhas: the Go peer in its three modes, openssl
s_server, nothing listening and a handshake that hangs."""

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
from tests.monitoring.test_metrics import promtool_check, series
from tests.support.dns import Dnsmasq, dnsmasq_server
from tests.support.gopeers import GoPeers, go_peers
from tests.support.mtlspeers import (
    closed_port,
    go_typha,
    hanging_typha,
    openssl_typha,
    split_typha,
)
from typhapki.typhaports import TLS_PORTS

__all__ = ["dnsmasq_server", "go_peers"]

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


def strict(rule: bytes) -> bool:
    """The strict rule of HIERA: its node addresses, not its networks."""
    return (
        b"mode strict" in rule
        and b"10.250.1.1" in rule
        and b"10.250.2.2" in rule
        and b"10.250.0.0/16" not in rule
    )


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


@contextmanager
def nothing(peers: GoPeers, out: Path) -> Iterator[str]:
    with closed_port() as port:
        yield f"127.0.0.1:{port}"


Server = Callable[[GoPeers, Path], AbstractContextManager[str]]
RELAXED, STRICT, KEPT = "relaxed", "strict", "kept"
# name: (server as the local Typha, the rule it gets, words of the one line, the reason
# of a negative proof). RELAXED: proven; STRICT: proven not to enforce mTLS, so the
# strict rule replaces the relaxed one at once; KEPT: no proof either way, the last rule
# stays.
CASES: dict[str, tuple[Server, str, str, str | None]] = {
    "go verify": (lambda p, o: go_typha(p, o, "verify"), RELAXED, "", None),
    "go no-client-cert": (
        lambda p, o: go_typha(p, o, "no-client-cert"),
        STRICT,
        "accepted a TLS client without a certificate",
        "no_certificate",
    ),
    "go plain": (lambda p, o: go_typha(p, o, "plain"), STRICT, "speaks plain TCP", "plain_tcp"),
    "openssl -Verify": (
        lambda p, o: openssl_typha(o, "-Verify", "1", "-verify_return_error"),
        RELAXED,
        "",
        None,
    ),
    "openssl -verify": (
        lambda p, o: openssl_typha(o, "-verify", "1", "-verify_return_error"),
        STRICT,
        "accepted a TLS client without a certificate",
        "no_certificate",
    ),
    "openssl -Verify, errors ignored": (
        lambda p, o: openssl_typha(o, "-Verify", "1"),
        STRICT,
        "accepted a client certificate from another CA",
        "other_ca",
    ),
    "nothing listening": (nothing, KEPT, "no fresh proof", None),
    # A listener that never answers is no proof either way: not a definitive negative.
    "silent listener": (lambda p, o: hanging_typha(), KEPT, "no answer", None),
    # TLS 1.3 only (TLS_MIN_VERSION=1.3): proven under TLS 1.3, so the relaxed rule is open
    # to it; one that takes a client without a certificate under TLS 1.3 is not.
    "go verify, TLS 1.3 only": (
        lambda p, o: go_typha(p, o, "verify", TLS_MIN_VERSION="1.3"),
        RELAXED,
        "",
        None,
    ),
    "openssl -Verify, TLS 1.3 only": (
        lambda p, o: openssl_typha(o, "-tls1_3", "-Verify", "1", "-verify_return_error"),
        RELAXED,
        "",
        None,
    ),
    "go no-client-cert, TLS 1.3 only": (
        lambda p, o: go_typha(p, o, "no-client-cert", TLS_MIN_VERSION="1.3"),
        STRICT,
        "accepted a TLS client without a certificate under TLS 1.3",
        "no_certificate",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_typha_gets_the_rule_it_should(
    go_peers: GoPeers, issued: Path, lab: Path, name: str
) -> None:
    server, outcome, words, reason = CASES[name]
    with server(go_peers, issued) as address:
        quick = ("--proof-timeout", "1") if name == "silent listener" else ()
        result = ferm(lab, issued, port_of(address), *quick)
    rule = (lab / "rule").read_bytes()
    recorded = state(lab)
    assert (recorded["mtls_negative_reason"], recorded["rule"]) == (
        reason,
        None if outcome == KEPT else outcome,
    )
    if outcome == RELAXED:
        assert result.returncode == 0, result.stderr
        assert b"mode relaxed" in rule and b"10.250.0.0/16" in rule
        assert recorded["mtls_verdict"] == "enforced"
        assert recorded["mtls_proof_expires"] == recorded["mtls_proven_at"] + 21600
        return
    lines = result.stderr.splitlines()
    assert recorded["mtls_proven_at"] is None
    if outcome == STRICT:
        # Exit 0: Puppet's exec then notifies the reload, and the kernel follows.
        assert result.returncode == 0, result
        assert strict(rule), rule
        assert len(lines) == 1 and lines[0].startswith("typhapki: warning: mTLS proof: "), lines
        assert words in lines[0] and lines[0].endswith("the strict rule replaces the relaxed one")
        assert recorded["mtls_verdict"] == "not_enforced"
        assert recorded["mtls_negative_at"] >= recorded["last_attempt"] - 60
        assert facts(lab)["mtls_negative_reason"] == reason
        return
    assert result.returncode == 1, result
    assert rule == OLD_RULE  # byte for byte
    assert len(lines) == 1 and lines[0].startswith("typhapki: mTLS proof: "), lines
    assert words in lines[0] and "the last rule stays" in lines[0]
    assert recorded["last_success"] is None and recorded["mtls_verdict"] == "unknown"
    assert recorded["mtls_negative_at"] is None


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
            # --check (Puppet's `unless`) finds the relaxed rule out of date...
            assert dropped.returncode == 1 and "without a certificate" in dropped.stderr
            assert "out of date" in dropped.stdout
            assert state(lab)["mtls_verdict"] == "not_enforced"
            assert state(lab)["mtls_proven_at"] is None
            assert (lab / "rule").read_bytes() == rule
            assert facts(lab)["mtls_enforced"] is False
            assert facts(lab)["rule"] == "relaxed"  # still: nothing was written
            # ...and the run rewrites the strict rule at once, exit 0.
            closed = ferm(lab, issued, local, "--typha-address", address)
        assert closed.returncode == 0, closed.stderr
        assert strict((lab / "rule").read_bytes())
        gate = facts(lab)
        assert (gate["rule"], gate["mtls_enforced"], gate["mtls_negative_reason"]) == (
            "strict",
            False,
            "no_certificate",
        )
        # Typha enforces mTLS again: proven, the relaxed rule comes back.
        with go_typha(go_peers, issued, "verify") as address:
            assert ferm(lab, issued, local, "--typha-address", address).returncode == 0
        assert (lab / "rule").read_bytes() == rule
        gate = facts(lab)
        assert (gate["rule"], gate["mtls_enforced"], gate["mtls_negative_reason"]) == (
            "relaxed",
            True,
            None,
        )


def test_the_cluster_typha_from_hiera(go_peers: GoPeers, issued: Path, lab: Path) -> None:
    hiera = lab / "hiera.yaml"
    with closed_port() as local, go_typha(go_peers, issued, "plain") as address:
        hiera.write_text(HIERA + f"        typha_address: '{address}'\n")
        result = ferm(lab, issued, local)
    assert result.returncode == 0 and f"Typha at {address} speaks plain TCP" in result.stderr
    assert strict((lab / "rule").read_bytes())
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
        (("--proof-lifetime", "100000000000000000000"), "--proof-lifetime"),
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
    assert b"calico_typha_v4" in rule
    if mode == "verify":
        assert result.returncode == 0, result.stderr
        assert b"10.250.0.0/16" in rule
        assert state(lab)["mtls_verdict"] == "enforced"
    else:
        # The same pipeline: the strict sets, the node addresses alone.
        assert result.returncode == 0, result
        assert "accepted a TLS client without a certificate" in result.stderr
        assert b"10.250.1.1" in rule and b"10.250.0.0/16" not in rule
        assert state(lab)["rule"] == "strict"


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
        assert seen.returncode == 0, seen
        lines = seen.stderr.splitlines()
        assert len(lines) == 1 and "without a certificate under TLS 1.3" in lines[0], lines
        rule = (lab / "rule").read_bytes()
        assert strict(rule)
        assert state(lab)["mtls_verdict"] == "not_enforced"
        assert state(lab)["mtls_proven_at"] is None
        assert facts(lab)["mtls_enforced"] is False

        gone = ferm(lab, issued, local)  # nothing listens, no --typha-address
        assert gone.returncode == 1 and "no fresh proof" in gone.stderr, gone
        assert (lab / "rule").read_bytes() == rule


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
    assert refused.returncode == 0 and "speaks plain TCP" in refused.stderr, refused
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


def metrics(lab: Path) -> dict[str, float]:
    """The ferm series of `typhapki metrics`: what Prometheus sees of the rule."""
    result = run_cli("metrics", "--out", lab / "none", "--state-dir", lab / "state", "--no-probe")
    assert result.returncode == 0, result.stderr
    promtool_check(result.stdout)
    return {k: v for k, v in series(result.stdout).items() if k.startswith("typhapki_ferm_")}


@pytest.mark.parametrize("why", ["dns_gate warn", "dns_gate enforce", "no cluster_nodes"])
def test_a_strict_rule_that_cannot_be_built_leaves_the_relaxed_one(
    go_peers: GoPeers,
    issued: Path,
    lab: Path,
    dnsmasq_server: Callable[..., Dnsmasq],
    why: str,
) -> None:
    """Proven, the relaxed rule written; then Typha speaks plain TCP while a node does
    not resolve (or hiera lists none): the strict rule cannot be built, so the relaxed
    one stays byte for byte, exit 1, and one line says so and why. The fact and the
    metrics say the relaxed rule is in force on a negative proof."""
    dns = dnsmasq_server({"n1.lab.test": ["10.250.1.1"], "n2.lab.test": ["10.250.2.2"]})
    gate = why.split()[-1] if why.startswith("dns_gate") else "enforce"
    hiera = HIERA.replace("[10.250.1.1, 10.250.2.2]", "[n1.lab.test, n2.lab.test]")
    (lab / "hiera.yaml").write_text(hiera + f"        dns_gate: {gate}\n")
    args = ("--nameserver", dns.arg)
    with closed_port() as local:
        with go_typha(go_peers, issued, "verify") as address:
            proven = ferm(lab, issued, local, "--typha-address", address, *args)
        assert proven.returncode == 0, proven.stderr
        relaxed = (lab / "rule").read_bytes()
        assert b"mode relaxed" in relaxed
        if why == "no cluster_nodes":
            (lab / "hiera.yaml").write_text(
                hiera.replace("      cluster_nodes: [n1.lab.test, n2.lab.test]\n", "")
            )
        else:
            (lab / "hiera.yaml").write_text(
                hiera.replace("n2.lab.test]", "n2.lab.test, gone.lab.test]")
                + f"        dns_gate: {gate}\n"
            )
        with go_typha(go_peers, issued, "plain") as address:
            blocked = ferm(lab, issued, local, "--typha-address", address, *args)
    assert blocked.returncode == 1, blocked
    assert (lab / "rule").read_bytes() == relaxed
    *gate_lines, line = blocked.stderr.splitlines()
    assert line.startswith(f"typhapki: mTLS proof: Typha at {address} speaks plain TCP"), line
    because = (
        "hiera.yaml:4: kubernetes::clusters.main.lab has no cluster_nodes to list"
        if why == "no cluster_nodes"
        else "1 of 3 cluster_nodes failed the DNS gate: gone.lab.test"
    )
    assert line.endswith(f"{because}): the relaxed rule stays in place"), line
    assert "; the strict rule cannot be built (" in line
    assert [g.split(": ")[1] for g in gate_lines] == (
        [] if why == "no cluster_nodes" else ["DNS gate"]
    ), gate_lines
    assert all("gone.lab.test" in g for g in gate_lines)
    fact = facts(lab)
    assert (fact["rule"], fact["mtls_enforced"], fact["mtls_negative_reason"]) == (
        "relaxed",
        False,
        "plain_tcp",
    )
    got = metrics(lab)
    assert got['typhapki_ferm_rule{cluster="lab",rule="relaxed"}'] == 1
    assert got['typhapki_ferm_rule{cluster="lab",rule="strict"}'] == 0
    seen = 'typhapki_ferm_mtls_negative_proof_timestamp_seconds{cluster="lab",reason="%s"}'
    assert got[seen % "plain_tcp"] == state(lab)["mtls_negative_at"] > 0
    assert got[seen % "no_certificate"] == got[seen % "other_ca"] == 0
    assert got['typhapki_ferm_mtls_proof_expiry_timestamp_seconds{cluster="lab"}'] == 0


@pytest.mark.parametrize("address", ["127.0.0.2", "127.0.0.2:5473"])
def test_at_retire_a_typha_on_the_plain_port_proves_nothing(
    issued: Path, lab: Path, address: str
) -> None:
    """issue 38: at retire the relaxed rule opens the TLS Typha's port, 5474. A Typha that
    enforces mTLS on 5473 at the configured address proves nothing for it: an address
    without a port is probed on 5474 (it was on 5473, parse_address's default), and one
    that names 5473 is refused. Nothing answers on 5474: no proof, the rule stays."""
    with socket.socket() as held, socket.socket() as plain:
        try:
            held.bind(("127.0.0.1", TLS_PORTS.server))  # nothing answers locally on 5474
            plain.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as s_server does
            plain.bind(("127.0.0.2", 5473))
        except OSError:
            pytest.skip("127.0.0.1:5474 or 127.0.0.2:5473 is taken on this machine")
        plain.close()
        staged(lab, "retire")
        verify = ("-Verify", "1", "-verify_return_error")
        with openssl_typha(issued, *verify, host="127.0.0.2", port=5473):
            result = ferm(lab, issued, 5473, "--typha-address", address)
    assert result.returncode == 1, result
    assert (lab / "rule").read_bytes() == OLD_RULE
    assert "no fresh proof" in result.stderr and "enforces mTLS" not in result.stderr
    if ":" in address:
        assert "tcp/5473 is the plain Typha's port" in result.stderr, result.stderr
    else:
        assert f"127.0.0.2:{TLS_PORTS.server}" in result.stderr, result.stderr
    assert state(lab)["mtls_verdict"] == "unknown"
