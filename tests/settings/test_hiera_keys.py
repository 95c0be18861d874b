"""Every hiera key changes the outcome as docs/options.md says: as its flag does, and a
flag wins over it; the cluster's pki_renew_seconds as the "Renewal" section of
docs/issuance.md says (the window while shorter than half the lifetime).

The keys come from the option table (typhapki/options.py, the options marked
`hiera`): a key added there without a sample here fails
`test_every_hiera_key_has_samples`. Each is resolved by `resolve`
(typhapki/settings/desired.py), the one resolution `check` and `issue` make, without
asking any signer. pki_renew_seconds is then proven through `check` itself, whose
printed renewal moment is what Puppet's `unless` acts on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_cli
from typhapki import options
from typhapki.errors import TyphapkiError
from typhapki.pki.signers.cfssl import CfsslSigner
from typhapki.settings.desired import Request, resolve
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import SignerOptions

CLUSTER = "staging-eqiad"
URL = "https://pki.example:8888"
NODE = "kube1001.eqiad.wmnet"
HIERA_KEYS = tuple(o.name for o in options.OPTIONS if o.hiera)
# Two values each key may take, both unlike its default.
SAMPLES: dict[str, tuple[Any, Any]] = {
    "typha_cn": ("typha-a", "typha-b"),
    "felix_cn": ("felix-a", "felix-b"),
    "typha_uri_san": ("spiffe://c/typha-a", "spiffe://c/typha-b"),
    "felix_uri_san": ("spiffe://c/felix-a", "spiffe://c/felix-b"),
    "key_type": ("ecdsa-p384", "rsa-2048"),
    "days": (30, 90),
    "typha_lifetime": ("28d", "72h"),
    "felix_lifetime": ("24h", "48h"),
    "renew_before": ("10d", "3d"),
    "key_owner": ("0", "1"),
    "key_group": ("0", "1"),
    "key_mode": ("0640", "0400"),
    "signer": ("cfssl", "local"),
    "cfssl_url": (URL, "https://pki2.example:8888"),
    "cfssl_profile_typha": ("typhaprof", "typhaother"),
    "cfssl_profile_felix": ("felixprof", "felixother"),
    "cfssl_label": ("discovery2026", "discovery"),
    # The Kubernetes wiring's (typhapki/settings/wiring.py), resolved by `manifests`.
    "tls_stage": ("parallel", "retire"),
    "tls_min_version": ("1.3", "1.2"),
    "tls_cipher_suites": (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    # The mTLS proof's Typha when none listens here (typhapki/firewall/pipeline.py):
    # loopback ports nothing serves, so the proof names the address it tried at once.
    "typha_address": ("127.0.0.1:9", "127.0.0.1:7"),
}


def _hiera(
    path: Path,
    typha: dict[str, Any],
    cluster: dict[str, Any] | None = None,
    defaults: dict[str, Any] | None = None,
) -> Path:
    entry: dict[str, Any] = {"cluster_nodes": ["kube1001.example"], **(cluster or {})}
    if typha:
        entry["typha"] = typha
    doc: dict[str, Any] = {"kubernetes::clusters": {"main": {CLUSTER: entry}}}
    if defaults:
        doc["kubernetes::clusters_defaults"] = defaults
    path.write_text(yaml.safe_dump(doc))
    return path


def _wiring_outcome(flags: dict[str, Any], hiera: Path) -> object:
    """What `manifests` renders by: the stage and the TLS policy."""
    from typhapki.settings.cluster import load_typha_settings
    from typhapki.settings.wiring import resolve as resolve_wiring

    return resolve_wiring(
        flags.get("tls_stage"),
        flags.get("tls_min_version"),
        flags.get("tls_cipher_suites"),
        load_typha_settings(hiera, CLUSTER),
    )


def _proof_outcome(flags: dict[str, Any], hiera: Path, out: Path) -> object:
    """Which Typha a relaxed rule's mTLS proof asks (ferm and nft), as its line says;
    nothing listens on the rule's port here, so the flag or hiera names the target."""
    import socket

    from typhapki.firewall.pipeline import GateOptions, _mtls_guard
    from typhapki.inventory.hiera import load_cluster

    with socket.socket() as unused:  # a loopback port nothing serves
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    opts = GateOptions(hiera, CLUSTER, out=out, state_dir=out.parent / "state",
                       proof_timeout=1, **flags)  # fmt: skip
    return _mtls_guard(opts, load_cluster(hiera, CLUSTER), port).line.replace(str(port), "P")


def _outcome(out: Path, pki: Any, signer: Any, hiera: Path) -> object:
    """What `check` and `issue` would act on: the settings and the signer's configuration
    (sources aside: where a value came from is not what it does), or the refusal."""
    if signer == "proof":  # the mTLS proof's setting: `_given` hands its flags
        return _proof_outcome(pki, hiera, out)
    if isinstance(pki, dict):  # a wiring setting: `_given` hands its flags
        return _wiring_outcome(pki, hiera)
    request = Request(out, "both", pki, signer, hiera=hiera, cluster=CLUSTER)
    try:
        desired = resolve(request, require_signer=False, ask_signer=False)
    except TyphapkiError as exc:
        return ("refused", type(exc).__name__)
    config = desired.signer.config if isinstance(desired.signer, CfsslSigner) else None
    return (desired.settings, type(desired.signer).__name__, config)


def _given(name: str, value: Any) -> tuple[Any, Any]:
    """The flags that set `name` to `value`, over what the signer options need around it
    (a cfssl signer and its URL, unless `name` is one of those)."""
    base: dict[str, Any] = {"signer": "cfssl", "cfssl_url": URL}
    group = options.BY_NAME[name].group
    if group in ("wiring", "proof"):
        return ({} if value is None else {name: value}), (None if group == "wiring" else "proof")
    if group == "signer":
        base[name] = value
        if name == "signer" and value == "local":
            base.pop("cfssl_url")
        return PkiOptions(node_name=NODE), SignerOptions(**base)
    return PkiOptions(node_name=NODE, **{name: value}), SignerOptions(**base)


def test_every_hiera_key_has_samples() -> None:
    assert set(SAMPLES) == set(HIERA_KEYS)


@pytest.mark.parametrize("name", HIERA_KEYS)
def test_a_hiera_key_acts_as_its_flag_and_the_flag_wins(tmp_path: Path, name: str) -> None:
    value, other = SAMPLES[name]
    out = tmp_path / "out"
    empty = _hiera(tmp_path / "empty.yaml", {})
    in_hiera = _hiera(tmp_path / "hiera.yaml", {name: value})
    other_hiera = _hiera(tmp_path / "other.yaml", {name: other})
    flags = _given(name, value)
    without = _given(name, None)
    by_flag = _outcome(out, *flags, empty)
    by_hiera = _outcome(out, *without, in_hiera)
    assert by_flag == by_hiera, name
    assert by_hiera != _outcome(out, *without, empty), f"hiera's {name} changes nothing"
    assert _outcome(out, *flags, other_hiera) == by_flag, f"hiera's {name} beat the flag"


def _renewal(out: Path, *args: str | Path) -> str:
    """`check`'s printed renewal moment of the set's one role."""
    result = run_cli("check", "--out", out, "--node-name", NODE, *args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    moment = re.search(r"renews \w+ at (\S+)", result.stdout)
    assert moment is not None, result.stdout
    return moment[1]


@pytest.mark.parametrize("where", ["cluster", "defaults"])
@pytest.mark.parametrize(("lifetime", "moves"), [("28d", True), ("24h", False)])
def test_pki_renew_seconds_moves_renewal_while_shorter_than_half_the_lifetime(
    tmp_path: Path, ca_dir: Path, lifetime: str, moves: bool, where: str
) -> None:
    """docs/issuance.md: 952200 s (11 days) is the window of a 28-day leaf, as
    `--renew-before 952200` makes it; a 24-hour leaf keeps the last third of its life."""
    out = tmp_path / "out"
    life = ["--role", "felix", "--felix-lifetime", lifetime]
    issued = run_cli("issue", "--ca-dir", ca_dir, "--out", out, *life)
    assert issued.returncode == 0, issued.stderr
    plain = _hiera(tmp_path / "plain.yaml", {})
    renew = {"pki_renew_seconds": 952200}  # in the cluster, or kubernetes::clusters_defaults
    fleet = _hiera(
        tmp_path / "fleet.yaml", {}, *((renew, None) if where == "cluster" else (None, renew))
    )
    before = _renewal(out, *life, "--hiera", plain, "--cluster", CLUSTER)
    after = _renewal(out, *life, "--hiera", fleet, "--cluster", CLUSTER)
    assert (after != before) == moves, (before, after)
    if moves:
        assert after < before  # an 11-day window opens before the last third (9.3 days)
        assert _renewal(out, *life, "--renew-before", "952200") == after
