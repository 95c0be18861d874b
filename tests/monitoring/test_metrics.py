"""`typhapki metrics`: valid exposition format for any set, however broken; the real
textfile collector of prometheus-node-exporter reads it without a scrape error."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, require, run_cli
from tests.support.issuing import ensure_local
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import RoleName
from typhapki.pki.x509compat import valid_until


def promtool_check(text: str) -> None:
    require("promtool")
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def series(text: str) -> dict[str, float]:
    """name{labels} -> value, from the text format."""
    out = {}
    for line in text.split("\n"):  # not splitlines(): a label value may hold U+0085
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def value(got: dict[str, float], name: str) -> float:
    """The one series called `name`, whatever its labels."""
    [found] = [v for k, v in got.items() if k.split("{")[0] == name]
    return found


def test_healthy_set(issued: Path, ca_dir: Path, tmp_path: Path) -> None:
    result = run_cli(
        "metrics", "--out", issued, "--ca-dir", ca_dir, "--state-dir", tmp_path, "--no-probe"
    )
    assert result.returncode == 0, result.stderr
    promtool_check(result.stdout)
    got = series(result.stdout)
    assert got['typhapki_set_valid{cluster=""}'] == 1
    assert got['typhapki_set_problems{cluster=""}'] == 0
    leaf = SetPaths(issued).cert(RoleName.TYPHA)
    from typhapki.pki.pem import load_certs

    cert = load_certs(leaf, "typha")[0]
    key = 'typhapki_cert_not_after_timestamp_seconds{cluster="",role="typha"}'
    assert got[key] == valid_until(cert).timestamp()
    assert got['typhapki_ca_rotation_stage{cluster=""}'] == 0
    assert got['typhapki_ferm_state{status="missing"}'] == 1
    assert all(v == 0 for k, v in got.items() if k.startswith("typhapki_collect_error"))
    # Bounded labels only: never a path or a serial in a label value.
    for name in got:
        assert "/" not in name and str(issued) not in name


def _corrupt_cert(out: Path) -> None:
    cert = SetPaths(out).cert(RoleName.TYPHA)
    cert.unlink()
    cert.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")


def _fifo_bundle(out: Path) -> None:
    # A FIFO must not hang the timer's run (read_regular refuses it).
    bundle = SetPaths(out).bundle
    bundle.unlink()
    os.mkfifo(bundle)


def _dir_for_key(out: Path) -> None:
    key = SetPaths(out).key(RoleName.FELIX)
    key.unlink()
    key.mkdir()


def _swap_keys(out: Path) -> None:
    paths = SetPaths(out)
    typha, felix = paths.key(RoleName.TYPHA), paths.key(RoleName.FELIX)
    if not felix.is_file():  # an earlier breakage got there first
        return
    typha.unlink()
    typha.write_bytes(felix.read_bytes())


def _empty_bundle(out: Path) -> None:
    bundle = SetPaths(out).bundle
    bundle.unlink()
    bundle.write_bytes(b"")


def _no_set(out: Path) -> None:
    import shutil

    shutil.rmtree(out)


def _unreadable_out(out: Path) -> None:
    import shutil

    shutil.rmtree(out)
    out.write_text("a file where the directory should be\n")


BREAKAGES: dict[str, Callable[[Path], None]] = {
    "corrupt cert": _corrupt_cert,
    "fifo bundle": _fifo_bundle,
    "dir key": _dir_for_key,
    "swapped key": _swap_keys,
    "empty bundle": _empty_bundle,
    "no set": _no_set,
    "file as out": _unreadable_out,
}

FERM_STATES = st.one_of(
    st.none(),  # no state file
    st.binary(max_size=64),  # garbage
    st.fixed_dictionaries(
        {
            "version": st.sampled_from([1, 2, "1"]),
            "cluster": st.text(max_size=12),
            "mode": st.sampled_from(["strict", "relaxed"]),
            "dns_gate": st.sampled_from(["enforce", "warn"]),
            "last_attempt": st.one_of(st.integers(0, 2**32), st.floats(), st.text(max_size=3)),
            "last_success": st.one_of(st.none(), st.integers(0, 2**32)),
            "hosts_failed": st.one_of(st.integers(0, 5000), st.booleans(), st.none()),
            "failed_hosts": st.lists(st.text(max_size=10), max_size=3),
            "output": st.none(),
        },
        optional={
            "mtls_proven_at": st.one_of(st.none(), st.integers(-1, 2**40), st.text(max_size=2)),
            "mtls_proof_expires": st.one_of(st.none(), st.integers(0, 2**32)),
            "mtls_verdict": st.sampled_from([None, "enforced", "not_enforced", "unknown", "yes"]),
            "mtls_proof_skipped": st.one_of(st.booleans(), st.none(), st.integers(0, 1)),
            "rule": st.sampled_from([None, "strict", "relaxed", "open"]),
            "mtls_negative_at": st.one_of(st.none(), st.integers(-1, 2**32)),
            "mtls_negative_reason": st.sampled_from([None, "plain_tcp", "no_certificate", "x"]),
        },
    ).map(lambda d: json.dumps(d).encode()),
)


@settings(
    max_examples=14,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    breakages=st.lists(st.sampled_from(sorted(BREAKAGES)), min_size=1, max_size=3, unique=True),
    ferm_state=FERM_STATES,
)
def test_broken_sets_are_metrics_not_failures(
    tmp_path_factory: pytest.TempPathFactory,
    ca_dir: Path,
    breakages: list[str],
    ferm_state: bytes | None,
) -> None:
    from typhapki.pki.issuance import load_issuer
    from typhapki.pki.settings import PkiSettings

    work = tmp_path_factory.mktemp("broken")
    out = work / "out"
    ensure_local(out, load_issuer(ca_dir), PkiSettings(), [RoleName.TYPHA, RoleName.FELIX])
    for name in breakages:
        if out.is_dir():
            BREAKAGES[name](out)
    if ferm_state is not None:
        (work / "ferm.json").write_bytes(ferm_state)
    result = run_cli("metrics", "--out", out, "--state-dir", work, "--no-probe", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    promtool_check(result.stdout)
    got = series(result.stdout)
    assert value(got, "typhapki_set_valid") == 0
    assert value(got, "typhapki_set_problems") >= 1
    state = {k: v for k, v in got.items() if k.startswith("typhapki_ferm_state{")}
    assert sum(state.values()) == 1  # exactly one of ok, missing, corrupt


def test_textfile_written_atomically_and_replaced(issued: Path, tmp_path: Path) -> None:
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    (textfiles / "typhapki.prom").write_text("# an older run\n")
    result = run_cli("metrics", "--out", issued, "--textfile-dir", textfiles, "--no-probe")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert os.listdir(textfiles) == ["typhapki.prom"]  # no temporary file left behind
    promtool_check((textfiles / "typhapki.prom").read_text())


def test_missing_textfile_dir_is_an_io_error(issued: Path, tmp_path: Path) -> None:
    result = run_cli("metrics", "--out", issued, "--textfile-dir", tmp_path / "nope")
    assert_one_line_error(result, 4, str(tmp_path / "nope"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_node_exporter_reads_the_textfile(issued: Path, ca_dir: Path, tmp_path: Path) -> None:
    require("prometheus-node-exporter")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    (tmp_path / "ferm.json").write_text(
        json.dumps(
            {"version": 1, "cluster": "staging-eqiad", "mode": "strict", "dns_gate": "enforce",
             "last_attempt": 1795000000, "last_success": 1795000000, "hosts_failed": 0,
             "failed_hosts": [], "output": None, "mtls_proven_at": 1795000000,
             "mtls_proof_expires": 1795021600, "mtls_verdict": "enforced",
             "mtls_proof_skipped": False}
        )
    )  # fmt: skip
    result = run_cli(
        "metrics", "--out", issued, "--ca-dir", ca_dir, "--textfile-dir", textfiles,
        "--state-dir", tmp_path, "--no-probe",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    port = _free_port()
    proc = subprocess.Popen(
        ["prometheus-node-exporter", "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textfiles}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        body = _scrape(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        proc.kill()
        proc.communicate()
    assert re.search(r"^node_textfile_scrape_error 0$", body, re.M), body
    assert re.search(r'^typhapki_set_valid\{cluster="staging-eqiad"\} 1$', body, re.M), body
    assert re.search(r'^typhapki_cert_not_after_timestamp_seconds\{.*role="felix"', body, re.M)
    assert re.search(
        r"^typhapki_ferm_last_success_timestamp_seconds\{.*\} 1\.795e\+09$", body, re.M
    )
    assert re.search(
        r"^typhapki_ferm_mtls_proof_expiry_timestamp_seconds\{.*\} 1\.7950216e\+09$", body, re.M
    ), body


def _scrape(url: str, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                assert proc.stderr is not None
                pytest.fail(f"node_exporter did not serve {url}: {proc.stderr.read()!r}")
            time.sleep(0.1)
