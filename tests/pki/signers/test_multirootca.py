"""The fleet's PKI as it runs: multirootca, one intermediate per cluster under one root.

A cluster moves to a new intermediate (label) in stages, by configuration alone: at
every stage one `issue` converges, `check` then agrees (exit 0) and a second `issue`
changes nothing; skipping the trust stage is refused by both with exit 3. Typha pins
its cluster's intermediate, so a Felix from another cluster under the same root is
refused (the Go peers verify as Typha and Felix do).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CliResult, assert_one_line_error, run_cli
from tests.support import gopeers
from tests.support import multirootca as multirootca_support
from tests.support.cfssl import write_auth_key
from tests.support.gopeers import GoPeers, exchange, felix_env, typha_env
from tests.support.multirootca import Multirootca
from typhapki.errors import EXIT_SIGNER, EXIT_USAGE
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint

# Heavy end to end: the Debian leg, and the trixie leg for its Puppet 8 components.
pytestmark = pytest.mark.once("debian", "trixie")

multirootca = multirootca_support.multirootca
restricted_multirootca = multirootca_support.restricted_multirootca
go_peers = gopeers.go_peers

OLD, NEW = multirootca_support.LABELS


def run(verb: str, out: Path, pki: Multirootca, key: Path, label: str, *trust: Path) -> CliResult:
    flags: list[str | Path] = []
    for ca in trust:
        flags += ["--trust", ca]
    return run_cli(
        verb, "--out", out, "--signer", "cfssl", "--cfssl-url", pki.url,
        "--cfssl-auth-key", key, "--cfssl-label", label, "--node-name", out.name, *flags,
    )  # fmt: skip


def bundle_of(out: Path) -> set[str]:
    return {fingerprint(c) for c in load_certs(SetPaths(out).bundle, "bundle")}


def fp(path: Path) -> str:
    return fingerprint(load_certs(path, "ca")[0])


def test_a_label_rotation_by_configuration_alone(
    multirootca: Multirootca, go_peers: GoPeers, tmp_path: Path
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    old_ca, new_ca = multirootca.ca_cert(OLD), multirootca.ca_cert(NEW)
    # docs/rotation.md, cfssl mode: (label, extra trust) per stage.
    stages: list[tuple[str, tuple[Path, ...]]] = [
        (OLD, ()),  # 0: the cluster on its intermediate
        (OLD, (new_ca,)),  # 1: trust the new intermediate everywhere
        (NEW, (old_ca,)),  # 2: sign with it, still trusting the old one
        (NEW, ()),  # 3: drop the old intermediate
    ]
    wanted = [{fp(old_ca)}, {fp(old_ca), fp(new_ca)}, {fp(old_ca), fp(new_ca)}, {fp(new_ca)}]
    nodes = [tmp_path / "kube7001", tmp_path / "kube7002"]
    for stage, (label, trust) in enumerate(stages):
        for node in nodes:
            first = run("issue", node, multirootca, key, label, *trust)
            assert first.returncode == 0, first.stderr
            assert first.stdout.strip() and "nothing changed" not in first.stdout
            assert run("check", node, multirootca, key, label, *trust).returncode == 0
            again = run("issue", node, multirootca, key, label, *trust)
            assert again.returncode == 0 and "nothing changed" in again.stdout
            assert bundle_of(node) == wanted[stage]
            if stage == 0:
                continue  # the other node has no set yet
            # Neighbouring stages talk, both ways: the first node is a stage ahead.
            for server, client in (nodes, nodes[::-1]):
                ex = exchange(go_peers, typha_env(server), felix_env(client))
                assert ex.accepted, (stage, ex.describe())


def test_moving_a_label_without_the_trust_stage_is_refused_by_both(
    multirootca: Multirootca, tmp_path: Path
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    node = tmp_path / "kube7101"
    assert run("issue", node, multirootca, key, OLD).returncode == 0
    before = SetPaths(node).bundle.read_bytes()
    # Trusting the new intermediate in the same change as signing with it is one step too.
    for trust in ((), (multirootca.ca_cert(NEW),)):
        checked = run("check", node, multirootca, key, NEW, *trust)
        issued = run("issue", node, multirootca, key, NEW, *trust)
        assert (checked.returncode, issued.returncode) == (3, 3), (checked, issued)
        assert "would become trusted in one step" in issued.stderr
        assert SetPaths(node).bundle.read_bytes() == before


def test_typha_refuses_a_felix_of_another_cluster_under_the_same_root(
    multirootca: Multirootca, go_peers: GoPeers, tmp_path: Path
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    a, b = tmp_path / "clusterA-kube1", tmp_path / "clusterB-kube1"
    assert run("issue", a, multirootca, key, OLD).returncode == 0
    assert run("issue", b, multirootca, key, NEW).returncode == 0
    # Each bundle pins its own intermediate, never the root they share.
    assert bundle_of(a) == {fp(multirootca.ca_cert(OLD))}
    assert fp(multirootca.root) not in bundle_of(a) | bundle_of(b)
    assert exchange(go_peers, typha_env(a), felix_env(a)).accepted
    foreign = exchange(go_peers, typha_env(a), felix_env(b))
    assert not foreign.accepted, foreign.describe()


def restricted_keys(directory: Path) -> dict[str, Path]:
    """The restricted configuration's auth keys as files on a node, by profile name."""
    return {
        name: write_auth_key(directory / f"cfssl-{name}.key", hex_key)
        for name, hex_key in multirootca_support.RESTRICTED_KEYS.items()
    }


def issue_restricted(
    pki: Multirootca, out: Path, *keys: str | Path, verb: str = "issue"
) -> CliResult:
    return run_cli(
        verb, "--out", out, "--role", "both", "--signer", "cfssl", "--cfssl-url", pki.url,
        "--cfssl-label", OLD, "--node-name", out.name, *keys,
    )  # fmt: skip


def test_the_restricted_configuration_works_on_a_typha_host(
    restricted_multirootca: Multirootca, go_peers: GoPeers, tmp_path: Path
) -> None:
    """docs/issuance.md's configuration as written: one key per profile, both on Typha."""
    keys = restricted_keys(tmp_path)
    node = tmp_path / "kubemaster7001"
    per_role = ("--cfssl-auth-key-typha", keys["typha"], "--cfssl-auth-key-felix", keys["felix"])
    first = issue_restricted(restricted_multirootca, node, *per_role)
    assert first.returncode == 0, first.stderr
    assert issue_restricted(restricted_multirootca, node, *per_role, verb="check").returncode == 0
    assert exchange(go_peers, typha_env(node), felix_env(node)).accepted
    # --cfssl-auth-key sets both; a per-role key wins for its role (a new set each time).
    for n, flags in enumerate(
        [
            ("--cfssl-auth-key", keys["felix"], "--cfssl-auth-key-typha", keys["typha"]),
            ("--cfssl-auth-key", keys["typha"], "--cfssl-auth-key-felix", keys["felix"]),
        ]
    ):
        other = tmp_path / f"kubemaster710{n}"
        result = issue_restricted(restricted_multirootca, other, *flags)
        assert result.returncode == 0, (flags, result.stderr)
    # The node configuration file carries them too, as the module writes them.
    config = tmp_path / "typhapki.yaml"
    config.write_text(
        f"version: 1\ndefaults:\n  cfssl_auth_key_typha: {keys['typha']}\n"
        f"  cfssl_auth_key_felix: {keys['felix']}\n"
    )
    config.chmod(0o644)
    from_file = run_cli(
        "issue", "--out", tmp_path / "kubemaster7110", "--role", "both", "--signer", "cfssl",
        "--cfssl-url", restricted_multirootca.url, "--cfssl-label", OLD,
        env={"TYPHAPKI_CONFIG": str(config)},
    )  # fmt: skip
    assert from_file.returncode == 0, from_file.stderr


def test_a_wrong_key_for_one_role_is_one_line_and_keeps_the_set(
    restricted_multirootca: Multirootca, tmp_path: Path
) -> None:
    keys = restricted_keys(tmp_path)
    node = tmp_path / "kubemaster7201"
    good = ("--cfssl-auth-key-typha", keys["typha"], "--cfssl-auth-key-felix", keys["felix"])
    assert issue_restricted(restricted_multirootca, node, *good).returncode == 0
    before = {p: p.read_bytes() for p in sorted(node.rglob("*")) if p.is_file()}
    typha, felix = "--cfssl-auth-key-typha", "--cfssl-auth-key-felix"
    for role, wrong in (
        ("typha", (typha, keys["nobody"], felix, keys["felix"])),
        ("felix", (typha, keys["typha"], felix, keys["nobody"])),
        ("typha", ("--cfssl-auth-key", keys["felix"])),  # the issue's "invalid token" host
    ):
        # Both roles are due (a new key type): the good one's signature is not published.
        result = issue_restricted(restricted_multirootca, node, *wrong, "--key-type", "ecdsa-p384")
        flag = "--cfssl-auth-key" if "--cfssl-auth-key" in wrong else f"--cfssl-auth-key-{role}"
        assert_one_line_error(
            result, EXIT_SIGNER, f"{role} certificate", f"cfssl profile {role}", f"label {OLD}",
            "/api/v1/cfssl/authsign", f"wrong or missing {flag} for profile {role}",
        )  # fmt: skip
        assert {p: p.read_bytes() for p in sorted(node.rglob("*")) if p.is_file()} == before
        assert issue_restricted(restricted_multirootca, node, *good, verb="check").returncode == 0


def test_a_worker_key_on_a_typha_host_is_refused_before_multirootca_404s(
    restricted_multirootca: Multirootca, tmp_path: Path
) -> None:
    """Only Felix's key on a node that asks for both roles: Typha's CSR would go to the
    unauthenticated /sign, which multirootca does not serve (404). Refused first."""
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as unserved:
        urllib.request.urlopen(
            urllib.request.Request(
                restricted_multirootca.url + "/api/v1/cfssl/sign", data=b"{}", method="POST"
            ),
            timeout=10,
        )
    assert unserved.value.code == 404
    keys = restricted_keys(tmp_path)
    node = tmp_path / "kubemaster7301"
    result = issue_restricted(restricted_multirootca, node, "--cfssl-auth-key-felix", keys["felix"])
    assert_one_line_error(
        result, EXIT_USAGE, "cfssl auth key of felix", "typha, a role of this node, has no auth key"
    )
    assert not node.exists()
    felix = run_cli(
        "issue", "--out", node, "--role", "felix", "--signer", "cfssl", "--cfssl-url",
        restricted_multirootca.url, "--cfssl-label", OLD, "--cfssl-auth-key-felix", keys["felix"],
    )  # fmt: skip
    assert felix.returncode == 0, felix.stderr


def fleet_hiera(path: Path, pki: Multirootca, base: str, label: str | None = None) -> Path:
    """A cluster as the fleet's hiera has it: its intermediate named by the cluster."""
    typha_label = f"        cfssl_label: {label}\n" if label is not None else ""
    path.write_text(
        "kubernetes::clusters:\n  main:\n    staging-eqiad:\n"
        f"      pki_intermediate_base: {base}\n"
        "      cluster_nodes: [kubestage1001.eqiad.wmnet]\n"
        f"      typha:\n        signer: cfssl\n        cfssl_url: {pki.url}\n{typha_label}"
    )
    return path


def test_the_label_comes_from_hiera(multirootca: Multirootca, tmp_path: Path) -> None:
    """pki_intermediate_base names the label; typha.cfssl_label wins; the bundle pins
    that label's intermediate, never the root."""
    key = write_auth_key(tmp_path / "auth.key")
    for n, (base, label, pinned) in enumerate([(OLD, None, OLD), (OLD, NEW, NEW)]):
        hiera = fleet_hiera(tmp_path / f"hiera{n}.yaml", multirootca, base, label)
        node = tmp_path / f"kubestage100{n}"
        args = ("--out", node, "--hiera", hiera, "--cluster", "staging-eqiad",
                "--cfssl-auth-key", key, "--node-name", node.name)  # fmt: skip
        issued = run_cli("issue", *args)
        assert issued.returncode == 0, issued.stderr
        assert bundle_of(node) == {fp(multirootca.ca_cert(pinned))}
        assert run_cli("check", *args).returncode == 0


def test_a_label_that_is_no_cfssl_label_is_exit_2_naming_the_key(
    multirootca: Multirootca, tmp_path: Path
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    node = tmp_path / "kubestage1101"
    base = ("--out", node, "--cluster", "staging-eqiad", "--cfssl-auth-key", key)
    for hiera, needle in (
        (fleet_hiera(tmp_path / "a.yaml", multirootca, "cluster-2025"), "pki_intermediate_base"),
        (fleet_hiera(tmp_path / "b.yaml", multirootca, OLD, "cluster-2026"), "typha.cfssl_label"),
    ):
        for verb in ("issue", "check"):
            result = run_cli(verb, *base, "--hiera", hiera)
            assert_one_line_error(result, 2, str(hiera), needle, "word characters only")
    flagged = run_cli(
        "issue", "--out", node, "--signer", "cfssl", "--cfssl-url", multirootca.url,
        "--cfssl-auth-key", key, "--cfssl-label", "cluster-2025",
    )  # fmt: skip
    assert_one_line_error(flagged, 2, "--cfssl-label", "word characters only")
    assert not node.exists()


def test_the_profiles_expiry_is_the_leaf_lifetime(multirootca: Multirootca, tmp_path: Path) -> None:
    """cfssl 1.2 signs for its profile's `expiry` (typha 672h, felix 24h here), which
    `info` reports: the cache keeps it per profile, the plan judges by it, and a local
    default that differs (--days 365) refuses nothing. A renewal window as long as a
    profile's lifetime is a usage error naming the role, from check and issue alike."""
    import json
    import os

    from typhapki.pki.x509compat import valid_from, valid_until

    key = write_auth_key(tmp_path / "auth.key")
    out = tmp_path / "kube7101"
    first = run("issue", out, multirootca, key, OLD)
    assert first.returncode == 0, first.stderr
    paths = SetPaths(out)
    lives = {}
    for role in ("typha", "felix"):
        leaf = load_certs(paths.cert(RoleName(role)), role)[0]
        lives[role] = (valid_until(leaf) - valid_from(leaf)).total_seconds()
    # cfssl backdates not-before by up to 5 minutes
    assert 672 * 3600 <= lives["typha"] <= 672 * 3600 + 600
    assert 24 * 3600 <= lives["felix"] <= 24 * 3600 + 600
    entries = {}
    for path in (Path(os.environ["TYPHAPKI_STATE_DIR"]) / "signer-ca").glob("*.json"):
        doc = json.loads(path.read_text())
        entries[doc["profile"]] = doc["expiry"]
    assert entries == {"typha": 672 * 3600, "felix": 24 * 3600}
    assert run("check", out, multirootca, key, OLD).returncode == 0
    again = run_cli(
        "issue", "--out", out, "--signer", "cfssl", "--cfssl-url", multirootca.url,
        "--cfssl-auth-key", key, "--cfssl-label", OLD, "--node-name", out.name, "--days", "365",
    )  # fmt: skip
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.stderr
    for verb in ("check", "issue"):
        result = run_cli(
            verb, "--out", out, "--signer", "cfssl", "--cfssl-url", multirootca.url,
            "--cfssl-auth-key", key, "--cfssl-label", OLD, "--renew-before", "2d",
        )  # fmt: skip
        assert_one_line_error(result, 2, "renew-before (2d)", "felix lifetime (cfssl")


def test_a_node_without_an_auth_key_is_told_which_key_is_missing(
    multirootca: Multirootca, tmp_path: Path
) -> None:
    """No auth key sends the CSR to cfssl's unauthenticated /sign, which multirootca does
    not serve: its 404 names the missing auth key, not "not a cfssl JSON answer"."""
    node = tmp_path / "kube1001"
    issued = run_cli(
        "issue", "--out", node, "--role", "felix", "--signer", "cfssl", "--cfssl-url",
        multirootca.url, "--cfssl-label", OLD, "--node-name", node.name,
    )  # fmt: skip
    assert issued.returncode == 5, issued.stderr
    line = issued.stderr.strip()
    assert "HTTP 404" in line and "no auth key for felix" in line, line
    assert "--cfssl-auth-key-felix" in line and "cfssl_auth_key" in line, line
    assert len(line.splitlines()) == 1
