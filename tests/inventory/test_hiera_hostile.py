"""Hostile hiera: random structure, depth and size, YAML bombs and special files.

In process, every generated document either loads or raises ConfigError (never
RecursionError, ValueError...). As processes, `ferm`, `lint-hiera` and `facts --hiera`
get the same documents: no traceback, a documented exit code, within a time bound (the
subprocess timeout), and the old rule file kept whenever nothing was rendered.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import against_servers, ci_examples, run_cli
from tests.firewall.test_ferm import ferm_lines
from tests.support.dns import Behaviour, ScriptedDns
from typhapki.errors import ConfigError
from typhapki.inventory.hiera import MAX_DEPTH, MAX_NODES, load_cluster, load_hiera
from typhapki.inventory.hostnames import MIN_PREFIX_V4, MIN_PREFIX_V6

# Seconds a process may take on any of these inputs, on a loaded 2-core machine. The
# merge-key bomb below took minutes before the caps.
BOUND = 30

TYPHA_KEYS = [
    "mode", "style", "port", "networks", "network_variable", "prefix_v4", "prefix_v6",
    "dns_gate", "ferm_output", "typha_cn", "days", "key_mode", "typha_address", "trust",
]  # fmt: skip
CLUSTER_KEYS = ["cluster_nodes", "control_plane_nodes", "ipv6dualstack", "typha"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.text(max_size=12),
    st.sampled_from(
        [
            "n1.lab.test", "n2.lab.test", "10.250.0.1", "0.0.0.0", "::1", "fe80::1",
            "0.0.0.0/0", "10.0.0.0/8", "10.250.0.0/16", "fd00::/16", "fd00::/64",
            "strict", "relaxed", "plain", "function", "enforce", "warn", "$NETS",
            "bad host;", "a\nb", "1" * 5000,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        ]
    ),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(TYPHA_KEYS + CLUSTER_KEYS) | st.text(max_size=6), inner)
    ),
    max_leaves=30,
)
typha = st.dictionaries(st.sampled_from(TYPHA_KEYS), values, max_size=6)
cluster = st.fixed_dictionaries(
    {},
    optional={
        "cluster_nodes": st.one_of(
            st.lists(st.sampled_from(["n1.lab.test", "n2.lab.test", "10.250.0.9"]), max_size=3),
            values,
        ),
        "ipv6dualstack": st.one_of(st.booleans(), values),
        "typha": st.one_of(typha, values),
    },
)
documents = st.fixed_dictionaries(
    {
        "kubernetes::clusters": st.fixed_dictionaries(
            {"main": st.fixed_dictionaries({"lab": cluster})}
        )
    },
    optional={
        "kubernetes::clusters_defaults": st.fixed_dictionaries({}, optional={"typha": typha})
    },
)


def deep(depth: int, flow: bool) -> str:
    """A value nested `depth` levels deep, under a cluster key."""
    if flow:
        return "kubernetes::clusters: {main: {lab: {typha: " + "[" * depth + "]" * depth + "}}}\n"
    lines = ["kubernetes::clusters:", "  main:", "    lab:", "      typha:"]
    lines += [" " * (8 + 2 * i) + "-" for i in range(depth)]
    return "\n".join(lines) + " x\n"


def merge_bomb(keys: int, merges: int) -> str:
    """One anchor of `keys` keys merged into `merges` mappings (aliases stay under 100)."""
    anchor = "base: &b {" + ", ".join(f"k{i}: {i}" for i in range(keys)) + "}\n"
    users = "".join(f"m{j}: {{<<: *b, own: {j}}}\n" for j in range(merges))
    return anchor + users + "kubernetes::clusters: {main: {lab: {cluster_nodes: [n1.lab.test]}}}\n"


bombs = st.one_of(
    st.builds(deep, st.integers(1, 20_000), st.booleans()),
    st.builds(merge_bomb, st.integers(1, 20_000), st.integers(1, 99)),
    st.just("x: " + "9" * 20_000 + "\nkubernetes::clusters: {main: {lab: {}}}\n"),
)
texts = st.one_of(documents.map(lambda d: yaml.safe_dump(d, width=10**6)), bombs)


# A merge bomb takes seconds to refuse and a deep block document is hundreds of MB: CI
# draws a third of the examples (new ones every run).
@settings(max_examples=ci_examples(150, 50), deadline=None)
@given(text=texts)
def test_any_document_loads_or_is_a_config_error(
    text: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("h") / "h.yaml"
    path.write_text(text)
    try:
        loaded = load_cluster(path, "lab")
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    for network in loaded.typha.networks:
        net = ipaddress.ip_network(network)
        assert net.prefixlen >= (MIN_PREFIX_V4 if net.version == 4 else MIN_PREFIX_V6)


def test_depth_limit_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    for flow in (True, False):
        path.write_text(deep(MAX_DEPTH - 4, flow))  # 4 levels above: clusters, main, lab, typha
        load_hiera(path)
        path.write_text(deep(MAX_DEPTH - 3, flow))
        with pytest.raises(ConfigError, match=f"nested more than {MAX_DEPTH} levels deep"):
            load_hiera(path)


def test_aliases_cannot_nest_past_the_depth_limit(tmp_path: Path) -> None:
    """Each alias adds the depth of its anchor: 30 levels of aliases of 30 levels."""
    lines = ["a0: &a0 " + "[" * 30 + "]" * 30]
    lines += [f"a{i}: &a{i} " + "[" * 29 + f"*a{i - 1}" + "]" * 29 for i in range(1, 30)]
    (tmp_path / "h.yaml").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="nested more than"):
        load_hiera(tmp_path / "h.yaml")


def test_merge_keys_are_charged_before_expansion(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    path.write_text(merge_bomb(MAX_NODES // 50, 60))  # 25 KB of text, 120,000 merged keys
    assert path.stat().st_size < 100_000
    with pytest.raises(ConfigError, match="merge-key bomb"):
        load_hiera(path)
    path.write_text(merge_bomb(100, 20))  # ordinary use of merge keys still works
    doc = load_hiera(path)
    assert set(doc.keys["m3"].value) == {*(f"k{i}" for i in range(100)), "own"}
    assert doc.keys["m3"].value["own"].value == 3


# --- the same inputs, as processes -----------------------------------------------------


@pytest.fixture(scope="module")
def synth_dns() -> Iterator[ScriptedDns]:
    with ScriptedDns(default=Behaviour.SYNTHESIZE) as server:
        yield server


def _no_traceback(*outputs: str) -> None:
    for output in outputs:
        assert "Traceback" not in output and "RecursionError" not in output, output[-2000:]


@against_servers(20)
@given(text=texts)
def test_ferm_lint_and_facts_on_any_document(
    text: str, synth_dns: ScriptedDns, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("p")
    hiera = tmp / "h.yaml"
    hiera.write_text(text)
    out = tmp / "rule"
    out.write_bytes(b"# old rule\n")
    env = {"TYPHAPKI_STATE_DIR": str(tmp / "state")}

    ferm = run_cli(
        "ferm", "--hiera", hiera, "--cluster", "lab", "--nameserver", synth_dns.arg,
        "--output", out, timeout=BOUND, env=env,
    )  # fmt: skip
    _no_traceback(ferm.stdout, ferm.stderr)
    assert ferm.returncode in (0, 1, 2), ferm.stderr
    if ferm.returncode == 0:
        v4, v6 = ferm_lines(out.read_text(), tmp)
        for line in v4 + v6:
            source = line.split("--source ")[1].split()[0]
            net = ipaddress.ip_network(source)
            assert net.prefixlen >= (MIN_PREFIX_V4 if net.version == 4 else MIN_PREFIX_V6)
    else:
        assert out.read_bytes() == b"# old rule\n"
        if ferm.returncode == 2:
            assert len(ferm.stderr.strip().splitlines()) == 1, ferm.stderr

    lint = run_cli("lint-hiera", "--nameserver", synth_dns.arg, hiera, timeout=BOUND)
    _no_traceback(lint.stdout, lint.stderr)
    assert lint.returncode in (0, 1, 2), lint.stderr

    facts = run_cli(
        "facts", "--out", tmp / "none", "--hiera", hiera, "--cluster", "lab", timeout=BOUND
    )
    _no_traceback(facts.stdout, facts.stderr)
    assert facts.returncode == 0, facts.stderr
    assert "typhapki" in json.loads(facts.stdout)


# --- special files ------------------------------------------------------------------------


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_fifo_hiera_file_and_fifo_in_a_hiera_directory(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "fifo.yaml")
    for path in (fifo, tmp_path):
        for args in (
            ("ferm", "--hiera", path, "--cluster", "lab"),
            ("lint-hiera", "--offline", path),
        ):
            result = run_cli(*args, timeout=BOUND)
            assert result.returncode == 2, result.stderr
            assert "a FIFO, not a regular file" in result.stderr
            _no_traceback(result.stderr)
        facts = run_cli(
            "facts", "--out", tmp_path, "--hiera", path, "--cluster", "lab", timeout=BOUND
        )
        fact: dict[str, Any] = json.loads(facts.stdout)["typhapki"]
        assert "a FIFO" in fact["error"]


def test_lint_reports_literals_that_cannot_be_a_node(tmp_path: Path) -> None:
    from typhapki.puppet.lint import lint

    path = tmp_path / "h.yaml"
    path.write_text(
        "kubernetes::clusters:\n  main:\n    lab:\n"
        "      cluster_nodes: [10.64.0.1, 127.0.0.1, '::ffff:10.0.0.1', 224.0.0.1]\n"
    )
    report = lint([path], offline=True)
    # (the text of an IPv4-mapped address differs between Python releases)
    assert [f.message.rsplit(" is ", 1)[-1] for f in report.findings] == [
        "loopback: not a node",
        "IPv4-mapped: not a node",
        "multicast: not a node",
    ]
