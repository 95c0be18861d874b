"""`lint-hiera` refuses exactly what `check --hiera` refuses on the nodes (DNS aside).

Generated hiera: clusters whose `typha:` mappings, defaults and own keys hold values
the nodes accept or refuse (issue 29: a hyphenated `pki_intermediate_base`, a leaf in
`typha.trust`, `cfssl_url: ftp://pki`, and their neighbours). Each cluster is judged by
`check --hiera FILE --cluster NAME` against a real cfssl (when the mapping names it) and
the file by `lint-hiera --offline --json`; both must refuse the same clusters, the lint
naming the file, line and key that `check` names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import against_servers, run_cli
from tests.support.cfssl import CfsslServer
from tests.support.cfssl import cfssl as cfssl  # the session's cfssl fixture

ABSENT = object()
# Values as the nodes see them: some accepted, some refused; "{cfssl}" is the real
# cfssl's URL, "{ca}" and "{leaf}" PEM texts.
TYPHA_VALUES: dict[str, list[object]] = {
    "signer": [ABSENT, "local", "cfssl", "vault"],
    "cfssl_url": [ABSENT, "{cfssl}", "ftp://pki", "http://pki.example.test"],
    "cfssl_label": [ABSENT, "k8s2026", "k8s-2026"],
    "trust": [ABSENT, ["{ca}"], ["{leaf}"], ["junk"]],
    "key_type": [ABSENT, "ecdsa-p384", "dsa"],
    "days": [ABSENT, 30, 0],
    "renew_before": [ABSENT, "10d", "40d", "soon"],
    "typha_cn": [ABSENT, "calico-typha", ""],
    "port": [ABSENT, 5473, 70000],
    "bogus": [ABSENT, ABSENT, ABSENT, 1],
}
BASES = [ABSENT, "k8s2026", "k8s-2026"]
HOSTS = ["n1.example.test", "10.0.0.9", "not a host"]
# check's own line: where the refused value is written, FILE:LINE: KEY.
WHERE = re.compile(r"(\S+?):(\d+): (kubernetes::[^\s()]*?)(?=:\s|:$|\)|$)")


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A CA certificate and a leaf it signed, as PEM texts."""
    from tests.support.issuing import ensure_local
    from typhapki.pki.issuance import init_ca, load_issuer
    from typhapki.pki.layout import CaPaths, SetPaths
    from typhapki.pki.settings import KeyType, PkiSettings, RoleName

    base = tmp_path_factory.mktemp("pems")
    init_ca(base / "ca", KeyType.ECDSA_P256, 3650, None, force=False)
    ensure_local(base / "out", load_issuer(base / "ca"), PkiSettings(), [RoleName.TYPHA])
    yield {
        "{ca}": CaPaths(base / "ca").cert.read_text(),
        "{leaf}": SetPaths(base / "out").cert(RoleName.TYPHA).read_text(),
    }


def mappings() -> st.SearchStrategy[dict[str, object]]:
    return st.fixed_dictionaries(
        {key: st.sampled_from(values) for key, values in TYPHA_VALUES.items()}
    ).map(lambda m: {k: v for k, v in m.items() if v is not ABSENT})


cluster_strategy = st.fixed_dictionaries(
    {
        "base": st.sampled_from(BASES),
        "hosts": st.lists(st.sampled_from(HOSTS), min_size=1, max_size=2),
        "typha": mappings(),
    }
)


def fill(value: object, table: dict[str, str]) -> object:
    if isinstance(value, str):
        return table.get(value, value)
    if isinstance(value, list):
        return [fill(v, table) for v in value]
    return value


def write_hiera(
    path: Path, defaults: dict[str, object], clusters: list[dict[str, Any]], table: dict[str, str]
) -> Path:
    data: dict[str, object] = {}
    if defaults:
        data["kubernetes::clusters_defaults"] = {"typha": fill(defaults, table)}
    members: dict[str, object] = {}
    for index, cluster in enumerate(clusters):
        entry: dict[str, object] = {"cluster_nodes": cluster["hosts"]}
        if cluster["base"] is not ABSENT:
            entry["pki_intermediate_base"] = cluster["base"]
        if cluster["typha"]:
            entry["typha"] = fill(cluster["typha"], table)
        members[f"c{index}"] = entry
    data["kubernetes::clusters"] = {"main": members}
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=1000))
    return path


@given(
    defaults=mappings(),
    clusters=st.lists(cluster_strategy, min_size=1, max_size=3),
)
@against_servers(25)
def test_lint_refuses_what_check_refuses(
    tmp_path: Path,
    cfssl: CfsslServer,
    pems: dict[str, str],
    defaults: dict[str, object],
    clusters: list[dict[str, Any]],
) -> None:
    table = {**pems, "{cfssl}": cfssl.url}
    path = write_hiera(tmp_path / "kubernetes.yaml", defaults, clusters, table)

    refused: dict[str, tuple[str, int, str]] = {}  # cluster -> where check says
    for index in range(len(clusters)):
        name = f"c{index}"
        result = run_cli(
            "check", "--hiera", path, "--cluster", name, "--out", tmp_path / "out",
            "--node-name", "n1.example.test",
        )  # fmt: skip
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode in (1, 2), (name, result.returncode, result.stderr)
        if result.returncode == 2:
            where = WHERE.search(result.stderr)
            assert where is not None, result.stderr  # a node names the value's place
            refused[name] = (where[1], int(where[2]), where[3])

    linted = run_cli("lint-hiera", "--offline", "--json", path)
    report = json.loads(linted.stdout)
    assert linted.returncode == (1 if refused else 0), (refused, report["problems"])
    found = {(p["file"], p["line"], p["key_path"]) for p in report["problems"]}
    for name, place in refused.items():
        assert place in found, (name, place, report["problems"])
    prefix = "kubernetes::clusters.main."
    for problem in report["problems"]:
        key = problem["key_path"]
        if key.startswith(prefix):
            assert key[len(prefix) :].split(".")[0].split("[")[0] in refused, problem
        else:  # the defaults: refused with every cluster that merges them
            assert key.startswith("kubernetes::clusters_defaults.") and refused, problem
    assert all("\n" not in p["message"] for p in report["problems"])


def test_the_issue_examples_are_named_at_their_line(tmp_path: Path, pems: dict[str, str]) -> None:
    """The three values of issue 29 that passed the lint while every node refused them."""
    path = tmp_path / "kubernetes.yaml"
    path.write_text(
        "kubernetes::clusters:\n"
        "  main:\n"
        "    hyphen:\n"
        "      pki_intermediate_base: k8s-2026\n"
        "      cluster_nodes: [n1.example.test]\n"
        "      typha: {signer: cfssl, cfssl_url: 'https://pki.example.test'}\n"
        "    leaf:\n"
        "      cluster_nodes: [n1.example.test]\n"
        "      typha:\n"
        f"        trust: [{json.dumps(pems['{leaf}'])}]\n"
        "    ftp:\n"
        "      cluster_nodes: [n1.example.test]\n"
        "      typha: {signer: cfssl, cfssl_url: 'ftp://pki'}\n"
    )
    result = run_cli("lint-hiera", "--offline", path)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"{path}:4: kubernetes::clusters.main.hyphen.pki_intermediate_base:")
    assert f"{path}:10: kubernetes::clusters.main.leaf.typha.trust[0]:" in lines[1]
    assert "is not a CA certificate" in lines[1]
    assert f"{path}:13: kubernetes::clusters.main.ftp.typha.cfssl_url" in lines[2]
    assert "3 settings of 3 clusters in 1 file refused" in result.stderr
