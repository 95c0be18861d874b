"""One resolution, hiera read once: every command that judges or makes the set reads the
cluster's hiera exactly once, in every issuance mode (issue 18: "`issue --hiera` loads
hiera twice" must not come back anywhere), and so does every command of the option
table that takes --hiera (issue 29).

The loader (typhapki/inventory/hiera.py `load_hiera`, under `load_cluster`) is wrapped to
count its calls; the commands run in this process (tests/support/inprocess.py), so the
wrapper sees them whatever TYPHAPKI_CLI_RUNNER says. In cfssl mode the signer is a
closed loopback port and its CA the fresh entry `check` would have cached: nothing is
asked, so each command runs to its verdict.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.inprocess import run_in_process
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.settings import KeyType
from typhapki.pki.signers import ca_cache
from typhapki.settings.desired import observe
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import SignerOptions

CLUSTER = "staging-eqiad"


def _closed_url() -> str:
    """A loopback URL nothing listens at (the port was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _hiera(path: Path, typha: dict[str, Any]) -> Path:
    doc = {
        "kubernetes::clusters": {
            "main": {CLUSTER: {"cluster_nodes": ["kube1001.example"], "typha": typha}}
        }
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _cache(url: str, ca_dir: Path) -> None:
    cert = load_issuer(ca_dir).cert
    now = int(time.time())
    state = Path(os.environ["TYPHAPKI_STATE_DIR"])
    for profile in ("typha", "felix"):
        entry = ca_cache.CachedCa(cert, now, now + 3600, now)
        ca_cache.write(ca_cache.cache_path(state, url, "", profile), url, "", entry, profile)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path the hiera loader is asked to read."""
    import typhapki.inventory.hiera as hiera

    seen: list[Path] = []
    real = hiera.load_hiera

    def counting(path: Path) -> hiera.HieraDoc:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(hiera, "load_hiera", counting)
    return seen


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the settings are built and this host's FQDN is looked up (a slow DNS
    answer is paid once per lookup)."""
    import typhapki.settings.pki as pki

    counts = {"settings": 0, "fqdn": 0}

    def wrap(name: str, what: str) -> None:
        real = getattr(pki, name)

        def counting(*args: Any) -> Any:
            counts[what] += 1
            return real(*args)

        monkeypatch.setattr(pki, name, counting)

    wrap("_build_settings", "settings")
    wrap("fqdn", "fqdn")
    return counts


def _run(*args: str | Path) -> tuple[int, str, str]:
    return run_in_process([str(a) for a in args], {}, 120)


@pytest.mark.parametrize("mode", ["local", "cfssl", "shipped"])
def test_every_command_reads_hiera_once(
    tmp_path: Path, loads: list[Path], work: dict[str, int], mode: str
) -> None:
    """... and builds its settings once, looking this host's FQDN up once (issue 31)."""
    ca_dir = tmp_path / "ca"
    init_ca(ca_dir, KeyType.ECDSA_P256, 3650, None, False)
    other = tmp_path / "other-ca"
    init_ca(other, KeyType.ECDSA_P256, 3650, None, False)
    typha: dict[str, Any] = {
        "typha_cn": "calico-typha",
        "trust": [(other / "typhaca.crt").read_text()],
    }
    out = tmp_path / "out"
    assert _run("issue", "--ca-dir", ca_dir, "--out", out, "--trust", other / "typhaca.crt")[0] == 0
    where: list[str | Path] = []
    if mode == "local":
        where = ["--ca-dir", ca_dir]
    elif mode == "cfssl":
        url = _closed_url()
        typha.update(signer="cfssl", cfssl_url=url)
        _cache(url, ca_dir)
    hiera: list[str | Path] = [
        "--hiera",
        _hiera(tmp_path / "hiera.yaml", typha),
        "--cluster",
        CLUSTER,
    ]
    common: list[str | Path] = ["--out", out, *where, *hiera]
    commands: list[list[str | Path]] = [
        ["check", *common],
        ["facts", *common, "--no-probe"],
        ["metrics", *common, "--no-probe"],
        ["check", "--nagios", *common, "--no-probe"],
    ]
    if mode == "shipped":  # Puppet shipped a copy of the set: check and install judge by it
        commands += [["check", *common, "--from", out], ["install", *common, "--from", out]]
    else:
        commands.append(["issue", *common])
    for command in commands:
        loads.clear()
        work.update(settings=0, fqdn=0)
        code, stdout, stderr = _run(*command)
        assert "Traceback" not in stderr, (command, stderr)
        assert len(loads) == 1, (command, loads, code, stdout, stderr)
        assert work == {"settings": 1, "fqdn": 1}, (command, work)
        if command[0] == "facts":
            assert json.loads(stdout)["typhapki"]["error"] is None, stdout
        elif command[0] == "metrics":
            assert 'typhapki_collect_error{source="settings"} 0' in stdout, stdout
        else:
            assert code == 0, (command, code, stdout, stderr)


def test_observe_keeps_what_did_not_fail(tmp_path: Path) -> None:
    """A hiera value that breaks one part (the signer's label) leaves the others resolved:
    monitoring still judges the set with the cluster's identities and trust."""
    other = tmp_path / "other-ca"
    init_ca(other, KeyType.ECDSA_P256, 3650, None, False)
    hiera = _hiera(
        tmp_path / "hiera.yaml",
        {
            "typha_cn": "typha-from-hiera",
            "trust": [(other / "typhaca.crt").read_text()],
            "signer": "cfssl",
            "cfssl_url": "https://pki.example:8888",
        },
    )
    doc = yaml.safe_load(hiera.read_text())
    doc["kubernetes::clusters"]["main"][CLUSTER]["pki_intermediate_base"] = "no-hyphens"
    hiera.write_text(yaml.safe_dump(doc))
    observed = observe(PkiOptions(felix_cn="felix-from-flag"), SignerOptions(), hiera, CLUSTER)
    assert len(observed.errors) == 1 and "pki_intermediate_base" in str(observed.errors[0])
    settings = observed.built_settings()
    assert (settings.typha.cn, settings.felix.cn) == ("typha-from-hiera", "felix-from-flag")
    assert [c.subject for c in observed.trusted] == [load_issuer(other).cert.subject]
    assert observed.signer is None  # the merge failed: no cached CA is named


def test_observe_never_raises_on_a_broken_hiera(tmp_path: Path) -> None:
    broken = tmp_path / "hiera.yaml"
    broken.write_text("kubernetes::clusters: [unclosed\n")
    observed = observe(PkiOptions(typha_cn="flag"), SignerOptions(), broken, CLUSTER)
    assert len(observed.errors) == 1 and str(broken) in str(observed.errors[0])
    assert observed.built_settings().typha.cn == "flag"  # the flags alone still count
    unpaired = observe(PkiOptions(), SignerOptions(), broken, None)
    assert ["--hiera needs --cluster" in str(e) for e in unpaired.errors] == [True]


# Values for the required options of the commands below (fleet gate's --hiera is the
# changed tree it compares with the old one: two reads, by design).
_REQUIRED = {"role": "felix", "stage": "trust-new", "mode": "strict"}


def test_every_command_that_takes_hiera_reads_it_once(tmp_path: Path, loads: list[Path]) -> None:
    """Generated from the option table: every command with --hiera reads it once, past
    its settings (it may fail later: a closed probe port, a missing CSR)."""
    from typhapki import options

    ca_dir, new_ca = tmp_path / "ca", tmp_path / "new-ca"
    for directory in (ca_dir, new_ca):
        init_ca(directory, KeyType.ECDSA_P256, 3650, None, False)
    out = tmp_path / "out"
    assert _run("issue", "--ca-dir", ca_dir, "--out", out)[0] == 0
    doc = {"kubernetes::clusters": {"main": {CLUSTER: {"cluster_nodes": ["192.0.2.10"]}}}}
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(yaml.safe_dump(doc))
    paths = {"out": out, "ca_dir": ca_dir, "new_ca_dir": new_ca, "csr": tmp_path / "no.csr",
             "kubeconfig": tmp_path / "no-kubeconfig"}  # fmt: skip
    commands = [
        c
        for c in options.COMMANDS
        if "hiera" in {o.name for o in c.options} and c.name != "fleet gate"
    ]
    assert {"check", "issue", "install", "request", "sign", "probe", "ferm", "nft"} <= {
        c.name for c in commands
    }
    for command in commands:
        argv: list[str | Path] = [*command.name.split(), "--hiera", hiera, "--cluster", CLUSTER]
        for opt in command.options:
            if opt.required and opt.name not in ("hiera", "cluster"):
                argv += [opt.flag, paths.get(opt.name) or _REQUIRED[opt.name]]
        extra: dict[str, list[str | Path]] = {
            "facts": ["--out", out],
            "install": ["--from", out],
            # hiera is read before PuppetDB is asked; nothing listens on port 1.
            "fleet": ["--puppetdb", "https://127.0.0.1:1"],
        }
        argv += extra.get(command.name, [])
        loads.clear()
        code, stdout, stderr = _run(*argv)
        assert "Traceback" not in stderr, (argv, stderr)
        assert len(loads) == 1, (argv, loads, code, stdout, stderr)
