"""Hiera-driven certificate settings: `--hiera PATH --cluster NAME`, flags winning."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from typhapki.errors import ConfigError, UsageError
from typhapki.inventory.hiera import TyphaSettings
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import KeyType, RoleName
from typhapki.pki.verify import subject_cn
from typhapki.settings.cluster import (
    cluster_settings,
    load_typha_settings,
    merged_signer,
    pki_options_of,
    require_pair,
)
from typhapki.settings.pki import PkiOptions, build_settings
from typhapki.settings.signer import SignerOptions

HIERA = """\
kubernetes::clusters_defaults:
  typha:
    days: 90
    renew_before: 20d
kubernetes::clusters:
  main:
    staging-eqiad:
      dc: eqiad
      cluster_nodes: [kubestage1001.eqiad.wmnet]
      typha:
        typha_cn: typha-staging
        felix_cn: felix-staging
        felix_uri_san: spiffe://staging-eqiad/felix
        key_type: ecdsa-p384
        key_mode: 0640
    plain:
      cluster_nodes: [kube1001.eqiad.wmnet]
"""


@pytest.fixture
def hiera(tmp_path: Path) -> Path:
    path = tmp_path / "hiera" / "common.yaml"
    path.parent.mkdir()
    path.write_text(HIERA)
    return path


def test_pair_both_or_neither(hiera: Path) -> None:
    assert require_pair(None, None) is False
    assert require_pair(hiera, "plain") is True
    with pytest.raises(UsageError, match="--hiera needs --cluster"):
        require_pair(hiera, None)
    with pytest.raises(UsageError, match="--cluster needs --hiera"):
        require_pair(None, "plain")


def test_cluster_settings_become_options(hiera: Path) -> None:
    typha = load_typha_settings(hiera, "staging-eqiad")
    assert typha is not None
    opts = pki_options_of(typha)
    assert opts == PkiOptions(
        typha_cn="typha-staging",
        felix_cn="felix-staging",
        felix_uri_san="spiffe://staging-eqiad/felix",
        key_type="ecdsa-p384",
        days=90,
        renew_before="20d",
        key_mode="0640",
    )
    settings = build_settings(opts)
    assert settings.key_type is KeyType.ECDSA_P384
    assert settings.key_files.mode == 0o640
    assert settings.felix.uri_san == "spiffe://staging-eqiad/felix"


def test_defaults_reach_a_cluster_without_typha(hiera: Path) -> None:
    opts = cluster_settings(PkiOptions(), hiera, "plain")[0]
    # hiera's days set both lifetimes
    assert (opts.typha_lifetime, opts.felix_lifetime, opts.renew_before) == ("90d", "90d", "20d")
    assert opts.typha_cn is None  # the built-in default applies later


def test_flags_win_over_hiera(hiera: Path) -> None:
    opts = cluster_settings(PkiOptions(typha_cn="from-flag", days=30), hiera, "staging-eqiad")[0]
    assert opts.typha_cn == "from-flag"
    assert (opts.typha_lifetime, opts.felix_lifetime) == ("30d", "30d")
    assert opts.felix_cn == "felix-staging"


def test_a_per_role_flag_wins_over_hieras_days_for_its_role_only(hiera: Path) -> None:
    opts = cluster_settings(PkiOptions(felix_lifetime="24h", renew_before="4h"), hiera, "plain")[0]
    settings = build_settings(opts)
    assert settings.felix_lifetime == timedelta(hours=24)
    assert settings.typha_lifetime == timedelta(days=90)  # hiera's days, for Typha


@pytest.mark.parametrize("flag", ["typha_lifetime", "felix_lifetime"])
def test_days_and_a_per_role_lifetime_is_a_usage_error_naming_both(flag: str) -> None:
    dashed = "--" + flag.replace("_", "-")
    with pytest.raises(UsageError, match=f"--days and {dashed} exclude each other"):
        if flag == "typha_lifetime":
            build_settings(PkiOptions(days=30, typha_lifetime="24h"))
        build_settings(PkiOptions(days=30, felix_lifetime="24h"))


def test_days_and_a_per_role_lifetime_in_hiera_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "common.yaml"
    path.write_text(HIERA.replace("    days: 90\n", "    days: 90\n    typha_lifetime: 28d\n"))
    where = re.escape(str(path))
    both = rf"{where}:\d+: \S*typha\.days and hiera {where}:\d+: \S*typha\.typha_lifetime exclude"
    with pytest.raises(ConfigError, match=both):
        cluster_settings(PkiOptions(), path, "plain")[0]


def test_without_hiera_flags_pass_through() -> None:
    flags = PkiOptions(felix_cn="x")
    assert cluster_settings(flags, None, None)[0] is flags


def test_issue_and_check_take_settings_from_hiera(
    hiera: Path, ca_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = ("--hiera", hiera, "--cluster", "staging-eqiad")
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", out, *args)
    assert result.returncode == 0, result.stderr
    paths = SetPaths(out)
    typha = load_certs(paths.cert(RoleName.TYPHA), "typha")[0]
    assert subject_cn(typha) == "typha-staging"
    assert (paths.key(RoleName.FELIX).stat().st_mode & 0o777) == 0o640
    assert run_cli("check", "--out", out, "--ca-dir", ca_dir, *args).returncode == 0
    # Without the hiera settings the same set is wrong (CNs, key type): check says so.
    plain = run_cli("check", "--out", out, "--ca-dir", ca_dir)
    assert plain.returncode == 1
    assert "typha-staging" in plain.stdout
    # A flag wins over hiera.
    flagged = run_cli("check", "--out", out, *args, "--typha-cn", "other")
    assert flagged.returncode == 1
    assert "'other'" in flagged.stdout


@pytest.mark.parametrize("command", ["issue", "check"])
def test_one_without_the_other_is_exit_2(command: str, hiera: Path, ca_dir: Path) -> None:
    extra = ("--ca-dir", ca_dir) if command == "issue" else ()
    result = run_cli(command, "--out", ca_dir.parent / "out", *extra, "--hiera", hiera)
    assert_one_line_error(result, 2, "--hiera needs --cluster")
    result = run_cli(command, "--out", ca_dir.parent / "out", *extra, "--cluster", "plain")
    assert_one_line_error(result, 2, "--cluster needs --hiera")
    assert not (ca_dir.parent / "out").exists()


def test_unknown_cluster_and_bad_values_are_one_line(hiera: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("check", "--out", out, "--hiera", hiera, "--cluster", "nope")
    assert_one_line_error(result, 2, str(hiera), "nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text(HIERA.replace("key_type: ecdsa-p384", "key_type: dsa-1024"))
    result = run_cli("check", "--out", out, "--hiera", bad, "--cluster", "staging-eqiad")
    assert_one_line_error(result, 2, str(bad), "staging-eqiad", "dsa-1024")


# -- the cfssl label: typha.cfssl_label, else the cluster's pki_intermediate_base --------

LABELISH = st.text(alphabet=st.sampled_from("abcXYZ019_-. /:é"), min_size=1, max_size=12)


def label_hiera(tmp_path: Path, base: str | None, label: str | None, signer: str) -> Path:
    lines = [
        "kubernetes::clusters:",
        "  main:",
        "    staging-eqiad:",
        "      cluster_nodes: [kubestage1001.eqiad.wmnet]",
    ]
    if base is not None:
        lines.append(f"      pki_intermediate_base: {json.dumps(base)}")
    lines += ["      typha:", f"        signer: {signer}"]
    if label is not None:
        lines.append(f"        cfssl_label: {json.dumps(label)}")
    path = tmp_path / f"hiera-{uuid.uuid4().hex}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _typha(hiera: Path, cluster: str) -> TyphaSettings:
    """The cluster's ``typha:`` mapping, loaded as resolve() loads it."""
    typha = load_typha_settings(hiera, cluster)
    assert typha is not None
    return typha


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base=st.none() | LABELISH,
    label=st.none() | LABELISH,
    flag=st.none() | st.sampled_from(["from_flag"]),
    signer=st.sampled_from(["cfssl", "local"]),
)
def test_the_label_is_the_flag_then_typha_then_the_intermediate_base(
    tmp_path: Path, base: str | None, label: str | None, flag: str | None, signer: str
) -> None:
    hiera = label_hiera(tmp_path, base, label, signer)
    word = re.compile(r"[A-Za-z0-9_]+")
    flags = SignerOptions(cfssl_label=flag)
    if label is not None and not word.fullmatch(label):
        # typha.cfssl_label is checked wherever it is written, whoever signs.
        with pytest.raises(ConfigError, match=r":\d+: .*cfssl_label: cfssl 1\.2 labels"):
            merged_signer(flags, _typha(hiera, "staging-eqiad"))
        return
    used_base = signer == "cfssl" and flag is None and label is None and base is not None
    if used_base and not word.fullmatch(str(base)):
        with pytest.raises(ConfigError, match=r":\d+: .*pki_intermediate_base: the cfssl label"):
            merged_signer(flags, _typha(hiera, "staging-eqiad"))
        return
    merged = merged_signer(flags, _typha(hiera, "staging-eqiad"))
    expected = flag if flag is not None else label if label is not None else None
    assert merged.cfssl_label == (base if used_base else expected)
    # The label remembers where it came from: an error about it names that place.
    where = merged.source("cfssl_label")
    if used_base:
        assert where.startswith(f"hiera {hiera}:"), where
        assert where.endswith(".staging-eqiad.pki_intermediate_base"), where
    elif flag is not None:
        assert where == "--cfssl-label"
    elif label is not None:
        assert where.startswith(f"hiera {hiera}:") and where.endswith("typha.cfssl_label"), where
    else:
        assert where == "the default"
    assert merged.source("signer").endswith("typha.signer")


def test_typha_trust_from_hiera_joins_the_bundle(tmp_path: Path, ca_dir: Path) -> None:
    """Stage 1 of a rotation as a hiera change: the cluster's typha.trust joins the
    bundle, leaves stay; without it the next issue drops the extra CA again."""
    new = tmp_path / "ca-new"
    assert run_cli("ca", "init", "--ca-dir", new).returncode == 0
    hiera = tmp_path / "h.yaml"
    cluster = {"cluster_nodes": ["kubestage1001.eqiad.wmnet"]}
    out = tmp_path / "out"
    flags = ("--ca-dir", ca_dir, "--out", out, "--hiera", hiera, "--cluster", "c")

    def bundle() -> list[str]:
        return [c.subject.rfc4514_string() for c in load_certs(SetPaths(out).bundle, "bundle")]

    def at(trust: list[str]) -> None:
        typha = {"trust": trust} if trust else {}
        data = {"kubernetes::clusters": {"main": {"c": {**cluster, "typha": typha}}}}
        hiera.write_text(yaml.safe_dump(data))

    at([])
    assert run_cli("issue", *flags).returncode == 0
    leaf = SetPaths(out).cert(RoleName.FELIX).read_bytes()
    old_cn, new_cn = (
        load_certs(CaPaths(d).cert, "ca")[0].subject.rfc4514_string() for d in (ca_dir, new)
    )
    assert bundle() == [old_cn]

    at([CaPaths(new).cert.read_text()])
    assert run_cli("check", "--quiet", *flags).returncode == 1
    assert run_cli("issue", *flags).returncode == 0
    assert bundle() == [old_cn, new_cn]
    assert SetPaths(out).cert(RoleName.FELIX).read_bytes() == leaf
    assert run_cli("check", "--quiet", *flags).returncode == 0

    at([])
    assert run_cli("check", "--quiet", *flags).returncode == 1
    assert run_cli("issue", *flags).returncode == 0
    assert bundle() == [old_cn]
