"""The PuppetDB client's failures: each one line, exit 8, in bounded time, never a traceback.

A hostile server on loopback (tests/support/hostile_cfssl.py: raw bytes, as slowly as
asked) stands in for the PuppetDB that misbehaves; the real PuppetDB's answers, TLS and
client-certificate refusal are proven in tests/fleet/test_fleet_puppetdb.py.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.support.hostile_cfssl import Answer, HostileCfssl, hostile_cfssl, nested_json, serving
from typhapki.errors import EXIT_PUPPETDB, PuppetDBError, TyphapkiError, UsageError
from typhapki.fleet.puppetdb import ClientTls, PuppetDB

__all__ = ["hostile_cfssl"]  # the fixture


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rows(path: str, body: bytes) -> Answer:
    return Answer(body=b"[]")


@pytest.mark.parametrize(
    "answer, needle",
    [
        (Answer(status=500, body=b"boom\x1b[2J"), "HTTP 500: boom\\x1b[2J"),
        (Answer(status=302, headers=(("Location", "http://elsewhere/"),)), "HTTP 302"),
        (Answer(body=b"<html>not json"), "malformed answer: not JSON"),
        (Answer(body=nested_json(200_000)), "malformed answer"),
        (Answer(body=b'{"a": 1}'), "malformed answer: expected a list"),
        (Answer(body=b'[{"certname": 7}]'), "malformed answer: a row without a text certname"),
    ],
)
def test_bad_answers_exit_8_with_one_line(
    hostile_cfssl: Callable[..., HostileCfssl], answer: Answer, needle: str
) -> None:
    server = hostile_cfssl(lambda path, body: answer)
    result = run_cli("fleet", "--puppetdb", server.url)
    assert_one_line_error(result, EXIT_PUPPETDB, server.url, needle)


def test_unreachable_exits_8() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    assert_one_line_error(run_cli("fleet", "--puppetdb", url), EXIT_PUPPETDB, url, "unreachable")


def test_a_trickling_puppetdb_is_cut_at_the_deadline(
    hostile_cfssl: Callable[..., HostileCfssl],
) -> None:
    """Each byte in time, the whole far too late: one deadline covers the run."""
    server = hostile_cfssl(lambda p, b: Answer(body=b"[]" + b" " * 200, chunk=2, interval=0.1))
    started = time.monotonic()
    result = run_cli("fleet", "--puppetdb", server.url, "--puppetdb-timeout", "1.5")
    assert_one_line_error(result, EXIT_PUPPETDB, "no complete answer within 1.5 s")
    assert time.monotonic() - started < 30


def test_tls_from_another_ca_is_refused(
    hostile_cfssl: Callable[..., HostileCfssl], tmp_path: Path
) -> None:
    server = hostile_cfssl(_rows, tls=True)
    other = hostile_cfssl(_rows, tls=True)  # only for its CA
    assert other.tls_ca is not None
    result = run_cli("fleet", "--puppetdb", server.url, "--puppetdb-ca", other.tls_ca)
    assert_one_line_error(result, EXIT_PUPPETDB, server.url, "TLS refused")
    # The right CA: the answer (no members at all) is an action, not a PuppetDB failure.
    assert server.tls_ca is not None
    ok = run_cli("fleet", "--puppetdb", server.url, "--puppetdb-ca", server.tls_ca, "--json")
    assert ok.returncode == 1, ok.stderr
    assert json.loads(ok.stdout) == {"healthy": False, "clusters": []}


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--puppetdb", "ftp://x"], "(from --puppetdb): expected http(s)"),
        (["--puppetdb", "http://127.0.0.1:99999"], "bad port"),
        (["--puppetdb", "https://127.0.0.1:1", "--puppetdb-cert", "/nonexistent.pem"],
         "/nonexistent.pem"),
        (["--puppetdb", "http://127.0.0.1:1", "--puppetdb-timeout", "0"], "--puppetdb-timeout"),
        (["--puppetdb", "http://127.0.0.1:1", "--max-age", "soon"], "--max-age"),
        ([], "--puppetdb URL is required"),
    ],
)  # fmt: skip
def test_bad_options_exit_2(args: list[str], needle: str) -> None:
    assert_one_line_error(run_cli("fleet", *args), 2, needle)


@settings(max_examples=40, deadline=None)
@given(body=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_answer_is_rows_or_one_error(body: bytes) -> None:
    """Whatever PuppetDB's body, the client returns JSON or raises PuppetDBError."""
    with serving(lambda p, b: Answer(body=body)) as server:
        db = PuppetDB(server.url, ClientTls(), timeout=10)
        try:
            answer = db.query("facts", ["=", "name", "typhapki"])
        except PuppetDBError as exc:
            assert "\n" not in str(exc)
        else:
            assert answer == json.loads(body)


def test_query_is_posted_as_json(hostile_cfssl: Callable[..., HostileCfssl]) -> None:
    server = hostile_cfssl(_rows)
    PuppetDB(server.url + "/prefix/", ClientTls(), 10).query("facts", ["=", "name", "x"])
    (received,) = server.received
    assert received.path == "/prefix/pdb/query/v4/facts"
    assert json.loads(received.body) == {"query": ["=", "name", "x"]}


def test_key_without_certificate_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        PuppetDB("https://127.0.0.1:1", ClientTls(key=tmp_path / "k.pem"))


# --- the client's files: regular files only, the key a secret --------------------------


@pytest.fixture(scope="module")
def client_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A CA, and a certificate and key that load together (the key 0600)."""
    from tests.support.cfssl import _tls_files

    ca, cert, key = _tls_files(tmp_path_factory.mktemp("client-pair"))
    key.chmod(0o600)
    return ca, cert, key


def _special(kind: str, path: Path) -> Path:
    if kind == "fifo":
        os.mkfifo(path)
        return path
    if kind == "directory":
        path.mkdir()
        return path
    if kind == "socket":
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(path))
        return path
    return Path("/dev/null")  # a character device


@pytest.mark.parametrize("option", ["--puppetdb-cert", "--puppetdb-key", "--puppetdb-ca"])
@pytest.mark.parametrize("kind", ["fifo", "directory", "socket", "device"])
def test_a_special_file_is_refused_not_waited_on(
    tmp_path: Path, client_pair: tuple[Path, Path, Path], option: str, kind: str
) -> None:
    """ssl's loaders open what they are given: a FIFO hung them for ever."""
    ca, cert, key = client_pair
    files = {"--puppetdb-cert": cert, "--puppetdb-key": key, "--puppetdb-ca": ca}
    files[option] = _special(kind, tmp_path / "special")
    args = [a for pair in files.items() for a in (pair[0], str(pair[1]))]
    started = time.monotonic()
    result = run_cli("fleet", "--puppetdb", "https://127.0.0.1:9", *args, timeout=20)
    assert_one_line_error(result, 2, option, str(files[option]))
    assert time.monotonic() - started < 10


@settings(max_examples=40, deadline=None)
@given(mode=st.integers(0o400, 0o777), foreign=st.booleans(), inside=st.booleans())
def test_the_key_is_held_to_the_rules_of_a_secret(
    client_pair: tuple[Path, Path, Path], mode: int, foreign: bool, inside: bool
) -> None:
    """Owned by root or the user typhapki runs as, nothing for others, no group write:
    else refused naming the key, whether it has a file of its own or sits in the
    certificate's file."""
    import tempfile

    ca, cert, key = client_pair
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "key.pem"
        copy.write_bytes(cert.read_bytes() + key.read_bytes() if inside else key.read_bytes())
        copy.chmod(mode)
        if foreign:
            os.chown(copy, 4242, -1)
        tls = ClientTls(copy, None, ca) if inside else ClientTls(cert, copy, ca)
        fine = not foreign and not mode & 0o027
        try:
            PuppetDB("https://127.0.0.1:9", tls, 5)
        except TyphapkiError as exc:
            assert not fine, exc
            assert exc.exit_code == 2 and str(copy) in str(exc), exc
            assert ("owned by uid 4242" if foreign else "chmod") in str(exc), exc
        else:
            assert fine, oct(mode)
