"""The cfssl client's answer handling, over any bytes a server might send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.support import cfssl as cfssl_support
from tests.support.cfssl import ProxyBehaviour, RecordingProxy
from typhapki.errors import EXIT_SIGNER, EXIT_USAGE, ConfigError, SignerError, UsageError
from typhapki.pki.settings import RoleName
from typhapki.pki.signers import cfssl as client
from typhapki.pki.signers.cfssl import CfsslConfig, CfsslSigner, read_auth_key, validate_url

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    status=st.sampled_from([200, 201, 400, 401, 404, 500, 502, 503]),
    body=st.one_of(
        st.binary(max_size=200),
        JSON.map(lambda v: json.dumps(v).encode()),
        st.fixed_dictionaries({"success": st.booleans(), "result": JSON, "errors": JSON}).map(
            lambda v: json.dumps(v).encode()
        ),
    ),
)
def test_any_answer_is_a_result_or_one_of_two_errors(status: int, body: bytes) -> None:
    signer = CfsslSigner(CfsslConfig(url="http://127.0.0.1:1"))
    url = "http://127.0.0.1:1/api/v1/cfssl/sign"
    try:
        result = signer._result(url, status, body)
    except SignerError as exc:
        assert str(exc).startswith(url)
        assert "\n" not in str(exc)
        return
    except client._Retryable:
        assert status >= 500
        return
    assert isinstance(result, dict)
    assert json.loads(body)["success"] is True
    assert 200 <= status < 300
    try:
        certs = signer._certificates(url, result)
    except SignerError as exc:
        assert str(exc).startswith(url)
    else:
        assert certs


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("ftp://pki", "http(s)://"),
        ("https://", "http(s)://"),
        ("https://pki:99999", "malformed"),
        ("https://user:pw@pki", "no credentials"),
        ("https://pki/?q=1", "no credentials"),
    ],
)
def test_bad_urls(url: str, needle: str) -> None:
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        validate_url(url)


def test_url_keeps_a_path_prefix() -> None:
    assert (
        validate_url("https://pki.example.org:8888/cfssl/") == "https://pki.example.org:8888/cfssl"
    )


def test_auth_key_file_rules(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_text(" 00ff \n")
    key.chmod(0o640)
    assert read_auth_key(key) == b"\x00\xff"
    for mode, why in ((0o604, "lets others read or write it"), (0o660, "lets its group write it")):
        key.chmod(mode)
        with pytest.raises(ConfigError, match=why):
            read_auth_key(key)
    key.chmod(0o600)
    for text in ("", "zz", "0"):
        key.write_text(text)
        with pytest.raises(ConfigError, match=str(key)):
            read_auth_key(key)
    with pytest.raises(ConfigError, match="directory"):
        read_auth_key(tmp_path)


@pytest.mark.parametrize("role", list(RoleName))
def test_a_role_key_that_cannot_be_used_names_the_role(tmp_path: Path, role: RoleName) -> None:
    shared = tmp_path / "shared.key"
    shared.write_text("00ff\n")
    shared.chmod(0o600)
    own = tmp_path / f"{role.value}.key"
    for problem in ("missing", "everyone", "not hex"):
        if problem != "missing":
            own.write_text("zz\n" if problem == "not hex" else "00ff\n")
            own.chmod(0o644 if problem == "everyone" else 0o600)
        config = CfsslConfig(url="http://127.0.0.1:1", auth_key_file=shared,
                             auth_key_files={role: own})  # fmt: skip
        with pytest.raises(ConfigError) as caught:
            CfsslSigner(config)
        said = f"cfssl auth key of {role.value} (from --cfssl-auth-key-{role.value}) {own}:"
        assert said in str(caught.value)
    own.chmod(0o600)
    own.write_text("0a0b\n")
    signer = CfsslSigner(
        CfsslConfig(url="http://127.0.0.1:1", auth_key_file=shared, auth_key_files={role: own})
    )
    # Its own key for the role, the shared one for the other.
    assert signer._auth_keys == {r: b"\x0a\x0b" if r is role else b"\x00\xff" for r in RoleName}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("672h", 672 * 3600), ("24h", 86400), ("1h30m", 5400), ("8760h", 8760 * 3600),
     ("90m", 5400), ("3600s", 3600), ("1.5h", 5400), ("", None), ("28d", None),
     ("-1h", None), ("0s", None), ("h", None), ("1h ", None), ("900000000h", None)],
)  # fmt: skip
def test_a_profiles_expiry_is_read_as_go_writes_durations(text: str, seconds: int | None) -> None:
    """cfssl's `info` reports a profile's `expiry` as its config has it: a Go duration."""
    parsed = client.parse_go_duration(text)
    assert (parsed.total_seconds() if parsed is not None else None) == seconds


@given(hours=st.integers(1, 10**5), minutes=st.integers(0, 59))
def test_go_durations_round_trip(hours: int, minutes: int) -> None:
    parsed = client.parse_go_duration(f"{hours}h{minutes}m")
    assert parsed is not None and parsed.total_seconds() == hours * 3600 + minutes * 60


# --- a role without its auth key, where another has one: refused before any request ---

REFUSED = b'{"success": false, "result": null, "errors": [{"code": 1, "message": "no"}]}'


@pytest.fixture(scope="module")
def refusing_signer() -> Iterator[RecordingProxy]:
    """A stand-in that records every request and refuses it as cfssl would (400)."""
    proxy = cfssl_support.start_proxy(ProxyBehaviour(route=str, status=400, answer=REFUSED))
    yield proxy
    cfssl_support.stop_proxy(proxy)


@settings(
    max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keyed=st.sampled_from(list(RoleName)),
    role=st.sampled_from(["both", "typha", "felix"]),
    command=st.sampled_from(["check", "issue"]),
    in_file=st.booleans(),
)
def test_a_role_without_its_auth_key_is_refused_before_any_request(
    keyed: RoleName,
    role: str,
    command: str,
    in_file: bool,
    tmp_path_factory: pytest.TempPathFactory,
    refusing_signer: RecordingProxy,
) -> None:
    """Only one role's key (Felix's on a worker): `--role both` would send Typha's CSR
    to cfssl's unauthenticated /sign, which multirootca answers with 404. Refused (exit
    2, one line naming the key given and where, and the role without one), with no
    request at all; a node holding only the keyed role goes on to ask."""
    base = tmp_path_factory.mktemp("node")
    key = cfssl_support.write_auth_key(base / f"{keyed.value}.key")
    flag = f"--cfssl-auth-key-{keyed.value}"
    proxy = refusing_signer
    proxy.records.clear()
    argv: list[str | Path] = [command, "--out", base / "out", "--role", role]
    argv += ["--signer", "cfssl", "--cfssl-url", proxy.url, "--cfssl-timeout", "1"]
    env = {"TYPHAPKI_CONFIG": ""}
    if in_file:
        config = base / "typhapki.yaml"
        config.write_text(f"defaults:\n  cfssl_auth_key_{keyed.value}: {key}\n")
        config.chmod(0o600)
        env = {"TYPHAPKI_CONFIG": str(config)}
        source = f"{config}: defaults.cfssl_auth_key_{keyed.value}"
    else:
        argv += [flag, key]
        source = flag
    result = run_cli(*argv, env=env)
    unkeyed = [r for r in ("typha", "felix") if r != keyed.value and role in (r, "both")]
    if not unkeyed:  # the keyed role alone: asked (the stand-in refuses)
        assert result.returncode == EXIT_SIGNER, result.stderr
        assert proxy.records
        return
    assert_one_line_error(
        result, EXIT_USAGE, f"cfssl auth key of {keyed.value} '{key}' (from {source})",
        f"{unkeyed[0]}, a role of this node, has no auth key", "unauthenticated /sign",
        f"--cfssl-auth-key-{unkeyed[0]}",
    )  # fmt: skip
    assert proxy.records == []
    assert not (base / "out").exists()
