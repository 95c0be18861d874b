"""Hiera loading: shape, defaults, safety (tags, aliases, malformed YAML), messages."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from typhapki.errors import ConfigError
from typhapki.inventory.hiera import (
    TyphaSettings,
    check_host_entries,
    cluster_names,
    iter_host_entries,
    load_cluster,
    load_hiera,
)
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.settings import RoleName

SAMPLE = ROOT / "hiera_sample"

BASE = """\
kubernetes::clusters_defaults:
  ipv6dualstack: false
  typha:
    port: 5473
    mode: strict
    prefix_v4: 24
kubernetes::clusters:
  main:
    staging:
      ipv6dualstack: true
      cluster_nodes:
        - a.example.test
        - b.example.test
      typha:
        mode: relaxed
  other:
    solo:
      cluster_nodes: [10.0.0.1]
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def error_of(path: Path, cluster: str = "staging") -> str:
    with pytest.raises(ConfigError) as info:
        load_cluster(path, cluster)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_sample_has_groups_dual_stack_and_ipv4_only_clusters() -> None:
    names = cluster_names(SAMPLE)
    assert len(names) >= 5
    clusters = [load_cluster(SAMPLE, n) for n in names]
    assert len({c.group for c in clusters}) >= 2
    assert {c.ipv6dualstack for c in clusters} == {True, False}
    staging = load_cluster(SAMPLE, "staging-eqiad")
    assert staging.group == "main"
    assert staging.source == SAMPLE / "kubernetes.yaml"
    assert staging.cluster_nodes[0] == "kubestagemaster1001.eqiad.wmnet"
    assert staging.control_plane_nodes == (
        "kubestagemaster1001.eqiad.wmnet",
        "kubestagemaster1002.eqiad.wmnet",
    )
    # defaults from common.yaml merged, the cluster's own typha: keys win
    assert staging.typha.style == "plain"
    assert staging.typha.port == 5473
    assert staging.typha.ferm_output == "/etc/ferm/ferm.d/10_calico-typha"
    assert check_host_entries(iter_host_entries(SAMPLE)) == []


def test_defaults_merge_deeply_and_cluster_wins(tmp_path: Path) -> None:
    path = write(tmp_path / "h.yaml", BASE)
    staging = load_cluster(path, "staging")
    assert staging.ipv6dualstack is True
    assert staging.typha == TyphaSettings(port=5473, mode="relaxed", prefix_v4=24)
    solo = load_cluster(path, "solo")
    assert solo.ipv6dualstack is False
    assert solo.cluster_nodes == ("10.0.0.1",)
    assert solo.control_plane_nodes == ()
    assert solo.typha.mode == "strict"


def test_explicit_null_unsets_a_default(tmp_path: Path) -> None:
    text = BASE.replace("        mode: relaxed", "        mode: relaxed\n        prefix_v4: null")
    assert load_cluster(write(tmp_path / "h.yaml", text), "staging").typha.prefix_v4 is None


def test_directory_of_files_is_united(tmp_path: Path) -> None:
    head, _, clusters = BASE.partition("kubernetes::clusters:\n")
    write(tmp_path / "10-defaults.yaml", head)
    write(tmp_path / "20-clusters.yml", "kubernetes::clusters:\n" + clusters)
    write(tmp_path / "notes.txt", "not: [yaml")
    doc = load_hiera(tmp_path)
    assert [f.name for f in doc.files] == ["10-defaults.yaml", "20-clusters.yml"]
    cluster = load_cluster(tmp_path, "staging")
    assert cluster.source == tmp_path / "20-clusters.yml"
    assert cluster.typha.prefix_v4 == 24


def test_same_top_level_key_in_two_files_names_both(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", BASE)
    write(tmp_path / "b.yaml", "kubernetes::clusters: {}\n")
    text = error_of(tmp_path)
    assert "b.yaml:1: kubernetes::clusters: already defined in" in text
    assert "a.yaml:8" in text


def test_duplicate_key_in_one_mapping(tmp_path: Path) -> None:
    text = error_of(write(tmp_path / "h.yaml", BASE + "kubernetes::clusters_defaults: {}\n"))
    assert "h.yaml:19: kubernetes::clusters_defaults: duplicate key (first at line 2)" in text


@pytest.mark.parametrize(
    "tagged",
    [
        "!!python/object/apply:os.system ['touch /tmp/pwned']",
        "!!python/name:os.system",
        "!custom a.example.test",
        "!!str a.example.test",
        "!<tag:yaml.org,2002:str> a.example.test",
    ],
)
def test_yaml_tags_are_refused(tmp_path: Path, tagged: str) -> None:
    text = BASE.replace("- b.example.test", f"- {tagged}")
    message = error_of(write(tmp_path / "h.yaml", text))
    assert message.startswith(f"{tmp_path / 'h.yaml'}:13: YAML tag ")
    assert "not allowed" in message


def test_tag_on_a_mapping_is_refused(tmp_path: Path) -> None:
    text = BASE.replace("kubernetes::clusters:\n", "kubernetes::clusters: !!map\n")
    assert "YAML tag" in error_of(write(tmp_path / "h.yaml", text))


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    path = write(tmp_path / "h.yaml", BASE + "\n".join(lines) + "\n")
    assert "alias bomb" in error_of(path)


def test_wide_alias_expansion_is_refused_under_the_alias_limit(tmp_path: Path) -> None:
    # 6 levels of 10 aliases: 60 aliases, 10**6 values once expanded.
    lines = ['b0: &b0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 7):
        refs = ", ".join([f"*b{i - 1}"] * 10)
        lines.append(f"b{i}: &b{i} [{refs}]")
    text = error_of(write(tmp_path / "h.yaml", BASE + "\n".join(lines) + "\n"))
    assert "more than 100000 values (alias bomb?)" in text


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "h.yaml", BASE + "loop: &loop [*loop]\n")
    assert "recursive alias" in error_of(path)


def test_small_anchors_and_merge_keys_work(tmp_path: Path) -> None:
    text = """\
    kubernetes::clusters:
      g:
        one:
          cluster_nodes: &nodes [a.example.test, b.example.test]
          typha: &t {mode: relaxed, port: 6000}
        two:
          cluster_nodes: *nodes
          typha:
            <<: *t
            port: 7000
    """
    path = write(tmp_path / "h.yaml", text)
    two = load_cluster(path, "two")
    assert two.cluster_nodes == ("a.example.test", "b.example.test")
    assert two.typha.mode == "relaxed"
    assert two.typha.port == 7000


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("kubernetes::clusters: [a, b\n", "h.yaml:2: malformed YAML"),
        ("kubernetes::clusters:\n  main: {\n", "malformed YAML"),
        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
        ("- a\n- b\n", "h.yaml:1: the top level must be a mapping"),
        ("key:\n\t- a\n", "h.yaml:2: malformed YAML"),
    ],
)
def test_malformed_yaml(tmp_path: Path, text: str, needle: str) -> None:
    assert needle in error_of(write(tmp_path / "h.yaml", text))


def test_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "h.yaml").write_bytes(b"kubernetes::clusters: \xff\n")
    assert "not UTF-8" in error_of(tmp_path / "h.yaml")


def test_missing_file_and_empty_directory(tmp_path: Path) -> None:
    assert "no such hiera file or directory" in error_of(tmp_path / "nope.yaml")
    (tmp_path / "empty").mkdir()
    assert "no *.yaml or *.yml files" in error_of(tmp_path / "empty")


def test_unknown_cluster_lists_known_names(tmp_path: Path) -> None:
    text = error_of(write(tmp_path / "h.yaml", BASE), "nope")
    assert "kubernetes::clusters: no cluster 'nope' (known: solo, staging)" in text


def test_no_clusters_key(tmp_path: Path) -> None:
    assert "no kubernetes::clusters key" in error_of(write(tmp_path / "h.yaml", "a: 1\n"))


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            "        - b.example.test",
            "        - 'bad host;'",
            "h.yaml:13: kubernetes::clusters.main.staging.cluster_nodes[1]: "
            "'bad host;' is not a valid hostname or IP",
        ),
        (
            "        - b.example.test",
            "        - a.example.test",
            "cluster_nodes[1]: duplicate node 'a.example.test' "
            "(also kubernetes::clusters.main.staging.cluster_nodes[0], line 12)",
        ),
        (
            "      cluster_nodes:\n        - a.example.test\n        - b.example.test\n",
            "      cluster_nodes: []\n",
            "kubernetes::clusters.main.staging.cluster_nodes: is empty",
        ),
        (
            "      cluster_nodes:\n        - a.example.test\n        - b.example.test\n",
            "      cluster_nodes: a.example.test\n",
            "cluster_nodes: expected a list of hosts, got str 'a.example.test'",
        ),
        ("      ipv6dualstack: true", "      ipv6dualstack: yes please", "ipv6dualstack: expected"),
        ("        mode: relaxed", "        mode: loose", "typha.mode: expected one of strict"),
        ("        mode: relaxed", "        style: fancy", "typha.style: expected one of"),
        ("        mode: relaxed", "        port: 70000", "typha.port: 70000 is not a TCP port"),
        ("        mode: relaxed", "        port: '5473'", "typha.port: '5473' is not a TCP port"),
        ("        mode: relaxed", "        days: -3", "typha.days: expected a positive"),
        (
            "        mode: relaxed",
            "        felix_lifetime: [24h]",
            "typha.felix_lifetime: expected a",
        ),
        (
            "      ipv6dualstack: true",
            "      pki_renew_seconds: 11d",
            "staging.pki_renew_seconds: expected a positive number of seconds, got '11d'",
        ),
        ("        mode: relaxed", "        typha_cn: [a]", "typha.typha_cn: expected a string"),
        ("        mode: relaxed", "        prefix_v6: 129", "typha.prefix_v6: expected a prefix"),
        ("        mode: relaxed", "        colour: red", "typha.colour: unknown key in typha:"),
        (
            "        mode: relaxed",
            "        networks: [10.0.0.0/8, '10.1.0.0/16; ACCEPT']",
            "typha.networks[1]: '10.1.0.0/16; ACCEPT' is not a valid CIDR network",
        ),
        ("        mode: relaxed", "        networks: []", "typha.networks: expected a non-empty"),
        (
            "        mode: relaxed",
            "        network_variable: '$X; ACCEPT'",
            "typha.network_variable: '$X; ACCEPT' is not a ferm variable name",
        ),
        (
            "      typha:\n        mode: relaxed\n",
            "      typha: [1]\n",
            "staging.typha: expected a mapping, got a list",
        ),
        ("  main:\n", "  'main group':\n", "'main group' is not a valid cluster group name"),
        ("    staging:\n", "    'stag\\ning':\n", "is not a valid cluster name"),
    ],
)
def test_bad_cluster_data_names_file_and_key_path(
    tmp_path: Path, old: str, new: str, needle: str
) -> None:
    assert old in BASE
    text = BASE.replace(old, new)
    cluster = "stag\ning" if "stag\\ning" in new else "staging"
    message = error_of(write(tmp_path / "h.yaml", text), cluster)
    assert message.startswith(str(tmp_path / "h.yaml")), message
    assert needle in message, message


def test_error_in_defaults_names_the_defaults_key(tmp_path: Path) -> None:
    text = BASE.replace("    port: 5473", "    port: x")
    message = error_of(write(tmp_path / "h.yaml", text))
    assert "h.yaml:4: kubernetes::clusters_defaults.typha.port: 'x'" in message


def test_pki_fields_kept_as_given(tmp_path: Path) -> None:
    text = BASE.replace(
        "        mode: relaxed",
        "        key_mode: 0640\n        renew_before: 86400\n        key_owner: 0\n"
        "        felix_uri_san: spiffe://c/felix\n        key_type: rsa-3072\n        days: 90",
    )
    typha = load_cluster(write(tmp_path / "h.yaml", text), "staging").typha
    assert typha.key_mode == "0640"
    assert typha.renew_before == "86400"
    assert typha.key_owner == "0"
    assert typha.felix_uri_san == "spiffe://c/felix"
    assert typha.key_type == "rsa-3072"
    assert typha.days == 90


def test_lifetimes_and_the_clusters_renewal_are_kept(tmp_path: Path) -> None:
    text = BASE.replace(
        "        mode: relaxed",
        "        typha_lifetime: 28d\n        felix_lifetime: 86400",
    ).replace(
        "      ipv6dualstack: true", "      ipv6dualstack: true\n      pki_renew_seconds: 952200"
    )
    typha = load_cluster(write(tmp_path / "h.yaml", text), "staging").typha
    assert (typha.typha_lifetime, typha.felix_lifetime) == ("28d", "86400")
    assert typha.pki_renew_seconds == 952200


def test_host_entries_and_collected_problems(tmp_path: Path) -> None:
    text = BASE.replace(
        "        - b.example.test", "        - 'bad;host'\n        - A.example.test."
    )
    text = text.replace("      cluster_nodes: [10.0.0.1]", "      cluster_nodes: []")
    text += "    third:\n      control_plane_nodes: [c.example.test]\n"
    path = write(tmp_path / "h.yaml", text)
    entries = iter_host_entries(path)
    paths = [e.key_path for e in entries]
    assert "kubernetes::clusters.main.staging.cluster_nodes[1]" in paths
    bad = entries[paths.index("kubernetes::clusters.main.staging.cluster_nodes[1]")]
    assert (bad.file, bad.line, bad.value) == (path, 13, "bad;host")
    problems = [p.message for p in check_host_entries(entries)]
    assert len(problems) == 4, problems
    assert any("cluster_nodes[1]: 'bad;host' is not a valid hostname" in p for p in problems)
    assert any("cluster_nodes[2]: duplicate node 'a.example.test'" in p for p in problems)
    assert any("other.solo.cluster_nodes: is empty" in p for p in problems)
    assert any("other.third.cluster_nodes: is missing" in p for p in problems)


def _trust_hiera(path: Path, entries: object) -> Path:
    data = {
        "kubernetes::clusters": {
            "main": {"staging": {"cluster_nodes": ["a.example.test"], "typha": {"trust": entries}}}
        }
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_typha_trust_holds_pem_ca_certificates(tmp_path: Path, ca_dir: Path) -> None:
    """A rotation's stage is a hiera change (docs/rotation.md): the CAs are PEM texts."""
    pem = CaPaths(ca_dir).cert.read_text()
    typha = load_cluster(_trust_hiera(tmp_path / "h.yaml", [pem, pem]), "staging").typha
    assert typha.trust == (pem, pem)
    assert load_cluster(_trust_hiera(tmp_path / "h.yaml", None), "staging").typha.trust == ()


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("ca", "typha.trust: expected a list of PEM CA certificates, got str"),
        (["leaf"], "typha.trust[0]: CN=calico-typha is not a CA certificate"),
        (["hello"], "typha.trust[0]: no PEM certificate found"),
        (["ca", 7], "typha.trust[1]: expected a string"),
        (["ca", "-----BEGIN CERTIFICATE-----\nAAAA\n"], "typha.trust[1]: corrupt PEM"),
    ],
)
def test_bad_typha_trust_names_the_entry(
    tmp_path: Path, issued: Path, ca_dir: Path, entry: str | list[object], needle: str
) -> None:
    pems = {
        "ca": CaPaths(ca_dir).cert.read_text(),
        "leaf": SetPaths(issued).cert(RoleName.TYPHA).read_text(),
    }

    def pem_of(e: object) -> object:
        return pems.get(e, e) if isinstance(e, str) else e

    value = pem_of(entry) if isinstance(entry, str) else [pem_of(e) for e in entry]
    message = error_of(_trust_hiera(tmp_path / "h.yaml", value))
    assert message.startswith(f"{tmp_path / 'h.yaml'}:"), message
    assert f"kubernetes::clusters.main.staging.{needle}" in message, message
