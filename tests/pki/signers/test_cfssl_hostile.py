"""The cfssl client against a hostile cfssl (tests/support/hostile_cfssl.py).

A server that trickles, nests, floods, redirects, injects control characters or
swaps its TLS CA gets one `SignerError` line (exit 5 at the CLI), by a deadline per
attempt and per run, and never a traceback, a hang or a followed redirect.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import against_servers, assert_one_line_error, run_cli
from tests.support import hostile_cfssl as hostile_support
from tests.support.hostile_cfssl import Answer, HostileCfssl, cfssl_json, nested_json, serving
from typhapki.deadline import MAX_JSON_DEPTH
from typhapki.errors import EXIT_SIGNER, EXIT_USAGE, SignerError, UsageError
from typhapki.pki.profiles import build_ca, cert_pem
from typhapki.pki.settings import RoleName
from typhapki.pki.signers import ca_cache
from typhapki.pki.signers.cfssl import (
    MAX_ANSWER,
    CfsslConfig,
    CfsslSigner,
    server_text,
    validate_url,
)

hostile_cfssl = hostile_support.hostile_cfssl
Start = Callable[..., HostileCfssl]

CA_PEM = cert_pem(
    build_ca(ec.generate_private_key(ec.SECP256R1()), "hostile-ca", 30, datetime.now(UTC))
).decode()
GOOD = cfssl_json(True, {"certificate": CA_PEM})
# What servers inject: terminal escapes, line breaks of every kind, bidi overrides.
NASTY = st.lists(
    st.sampled_from(["\x1b[2J", "\n", "\r", "\x00", "\x7f", "\x85", "\u2028", "\u202e", "ok"]),
    min_size=1,
    max_size=8,
).map("".join)


def signer(url: str, **config: object) -> CfsslSigner:
    return CfsslSigner(CfsslConfig(url=url, **config))  # type: ignore[arg-type]


def ask_info(client: CfsslSigner) -> object:
    """The info API itself: current_ca() would let a cached CA stand in for a failure."""
    return client._fetch_ca("")


def assert_one_clean_line(exc: SignerError, url: str) -> None:
    text = str(exc)
    # What was asked (the label's CA, or a role's certificate), then the URL and the cause.
    assert text.startswith(("CA of cfssl ", "typha certificate (", "felix certificate (")), text
    assert f": {url}" in text, text
    assert text.isprintable(), repr(text)  # no newline, escape or bidi control survives


def test_a_trickled_answer_ends_by_the_attempt_deadline(hostile_cfssl: Start) -> None:
    """Every byte arrives well within the timeout: per-read timeouts would wait ~4 s
    and then take the answer; one deadline per attempt gives up after 0.3 s."""
    server = hostile_cfssl(lambda _p, _b: Answer(body=GOOD, chunk=8, interval=0.05))
    with pytest.raises(SignerError) as caught:
        ask_info(signer(server.url, timeout=0.3, attempts=1))
    assert "no complete answer within 0.3s" in str(caught.value)


def test_the_run_deadline_bounds_every_attempt_and_pause(hostile_cfssl: Start) -> None:
    """Three attempts of 0.3 s with pauses of 1 and 2 s would take 3.9 s; the run has 0.5 s."""
    server = hostile_cfssl(lambda _p, _b: Answer(body=GOOD, chunk=1, interval=0.1))
    with pytest.raises(SignerError) as caught:
        ask_info(signer(server.url, timeout=0.3, attempts=3, run_timeout=0.5))
    assert "this run's 0.5s for the signer are spent" in str(caught.value)
    assert len(server.received) == 1


def test_a_later_request_gets_only_what_is_left_of_the_run(hostile_cfssl: Start) -> None:
    answers = iter([Answer(body=GOOD), Answer(body=GOOD, chunk=1, interval=0.1)])
    server = hostile_cfssl(lambda _p, _b: next(answers))
    client = signer(server.url, timeout=5, attempts=1, run_timeout=0.4)
    ask_info(client)  # fast: the run's clock starts here
    with pytest.raises(SignerError, match=r"within this run's 0\.4s"):
        ask_info(client)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_never_followed(hostile_cfssl: Start, status: int) -> None:
    elsewhere = hostile_cfssl(lambda _p, _b: Answer(body=GOOD))
    server = hostile_cfssl(
        lambda p, _b: Answer(status, GOOD, headers=(("Location", elsewhere.url + p),))
    )
    with pytest.raises(SignerError) as caught:
        ask_info(signer(server.url, attempts=1))
    assert f"HTTP {status} redirect to {elsewhere.url}" in str(caught.value)
    assert "not followed" in str(caught.value)
    assert elsewhere.received == []


@against_servers(25)
@given(depth=st.integers(MAX_JSON_DEPTH + 1, 100_000), status=st.sampled_from([200, 400, 500]))
def test_nested_json_is_one_line(depth: int, status: int) -> None:
    body = nested_json(depth)
    with (
        serving(lambda _p, _b: Answer(status, body)) as server,
        pytest.raises(SignerError) as caught,
    ):
        ask_info(signer(server.url, attempts=1))
    assert_one_clean_line(caught.value, server.url)
    assert f"nested more than {MAX_JSON_DEPTH} levels deep" in str(caught.value)


@against_servers(30)
@given(
    status=st.sampled_from([200, 301, 400, 401, 404, 500, 503]),
    body=st.one_of(
        st.sampled_from(["good", "open-braces", "oversized"]).map(
            lambda kind: {"good": GOOD, "open-braces": b"{" * 5000}.get(
                kind, b" " * (MAX_ANSWER + 1)
            )
        ),
        st.binary(max_size=64),
        st.lists(NASTY, min_size=1, max_size=3).map(lambda m: cfssl_json(False, None, tuple(m))),
        NASTY.map(lambda m: cfssl_json(True, {"certificate": m})),
        st.integers(1, 40).map(nested_json),
    ),
    location=NASTY,
    chunk=st.sampled_from([0, 0, 7, 512]),
)
def test_any_behaviour_is_a_result_or_one_clean_line(
    status: int, body: bytes, location: str, chunk: int
) -> None:
    location = location.replace("\r", "").replace("\n", "")  # one header line
    answer = Answer(status, body, headers=(("Location", location),), chunk=chunk)
    try:
        with serving(lambda _p, _b: answer) as server:
            ca = ask_info(signer(server.url, timeout=2, attempts=1))
    except SignerError as exc:
        assert_one_clean_line(exc, server.url)
        if len(body) > MAX_ANSWER and not 300 <= status < 400:
            assert f"larger than {MAX_ANSWER} bytes" in str(exc)
    else:
        assert status == 200 and body == GOOD and ca is not None


def test_server_text_is_escaped_not_dropped() -> None:
    assert server_text("bad\n\x1b[31mred\u202e") == "bad\\x0a\\x1b[31mred\\u202e"
    assert server_text("x" * 300).endswith("...")
    assert server_text("a\\x0a") == "a\\x5cx0a"  # a literal backslash cannot fake an escape


def test_a_swapped_tls_ca_is_refused_mid_run(hostile_cfssl: Start) -> None:
    """Pinned to the CA cfssl's TLS had: a server presenting another CA's certificate
    (a man in the middle, after the first request) is not talked to."""
    server = hostile_cfssl(lambda _p, _b: Answer(body=GOOD), tls=True)
    assert server.tls_ca is not None
    pinned = server.tls_ca
    client = signer(server.url, ca_file=pinned, attempts=1)
    ask_info(client)
    server.swap_tls_ca()
    with pytest.raises(SignerError, match="TLS certificate not trusted"):
        ask_info(client)
    assert len(server.received) == 1  # the request never reached the impostor


LOOPBACK = st.sampled_from(["127.0.0.1", "127.8.9.10", "[::1]", "localhost", "LOCALHOST"])
REMOTE = st.sampled_from(
    ["pki.example.org", "10.0.0.1", "[2001:db8::1]", "localhost.example.org", "127.0.0.1.nip.io"]
)


@given(host=LOOPBACK | REMOTE, allow=st.booleans(), port=st.integers(1, 65535))
def test_plain_http_only_to_loopback_or_with_the_opt_in(host: str, allow: bool, port: int) -> None:
    url = f"http://{host}:{port}"
    remote = host.strip("[]").lower() not in ("127.0.0.1", "127.8.9.10", "::1", "localhost")
    if remote and not allow:
        with pytest.raises(UsageError, match="--cfssl-allow-http"):
            validate_url(url, allow)
    else:
        assert validate_url(url, allow) == url
    assert validate_url(f"https://{host}:{port}") == f"https://{host}:{port}"


def test_cli_refuses_plain_http_to_a_remote_signer(tmp_path: Path) -> None:
    out = tmp_path / "node"
    url = "http://pki.example.org:8888"
    result = run_cli("issue", "--out", out, "--signer", "cfssl", "--cfssl-url", url)
    assert_one_line_error(result, EXIT_USAGE, "plain http:// to pki.example.org")
    assert not out.exists()
    result = run_cli("issue", "--out", out, "--ca-dir", tmp_path, "--cfssl-allow-http")
    assert_one_line_error(result, EXIT_USAGE, "(from --cfssl-allow-http): needs --signer cfssl")


@pytest.mark.parametrize("kind", ["nested", "control-characters"])
def test_cli_one_line_exit_5_and_nothing_written(
    hostile_cfssl: Start, tmp_path: Path, kind: str
) -> None:
    body = (
        nested_json(100_000)
        if kind == "nested"
        else json.dumps(
            {"success": False, "errors": [{"code": 1, "message": "no\n\x1b[2Jtyphapki: ok"}]}
        ).encode()
    )
    server = hostile_cfssl(lambda _p, _b: Answer(400, body))
    out = tmp_path / "node"
    result = run_cli("issue", "--out", out, "--signer", "cfssl", "--cfssl-url", server.url)
    assert_one_line_error(result, EXIT_SIGNER, server.url)
    assert "\x1b" not in result.stderr
    assert not out.exists() or not any(out.rglob("*.crt"))


@pytest.mark.parametrize(
    ("status", "body", "refused"),
    [
        (403, b"<html>Forbidden</html>", True),  # the front's access rules
        (401, b"", True),
        (400, cfssl_json(False, messages=("label not allowed\n\x1b[2Jok",)), True),
        (404, b"<html>Not Found</html>", False),  # a wrong URL: no word on this node
        (503, b"", False),  # down
    ],
)
def test_only_a_refusal_is_recorded_and_an_answer_clears_it(
    hostile_cfssl: Start, tmp_path: Path, status: int, body: bytes, refused: bool
) -> None:
    """Issue 39: what monitoring reads (typhapki/pki/signers/ca_cache.py). A refusal is
    recorded as one printable line; a signer that is down or misaddressed refuses
    nothing; the next CA it gives confirms the node."""
    answers = [Answer(status, body), Answer(body=GOOD)]
    server = hostile_cfssl(lambda _p, _b: answers[0] if len(answers) == 1 else answers.pop(0))
    client = signer(server.url, attempts=1, state_dir=tmp_path, roles=(RoleName.FELIX,))
    with pytest.raises(SignerError):
        client.current_ca()
    path = ca_cache.answer_path(tmp_path, server.url, "")
    answer = ca_cache.read_answer(path, server.url, "", time.time())
    if not refused:
        assert answer is None
    else:
        assert answer is not None and answer.refused and answer.reason is not None
        assert answer.reason.isprintable() and server.url in answer.reason, answer
    signer(server.url, attempts=1, state_dir=tmp_path, roles=(RoleName.FELIX,)).current_ca()
    answer = ca_cache.read_answer(path, server.url, "", time.time())
    assert answer is not None and not answer.refused and answer.confirmed_at is not None
