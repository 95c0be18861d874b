"""Reading a kubeconfig: what kubectl accepts for a client pair or token works; a hostile
or unsupported file is one line naming the file and the key (exit 2)."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.support.kubeapi import TOKEN, Cluster, FakeApi
from typhapki.errors import EXIT_USAGE, ConfigError, TyphapkiError
from typhapki.kubernetes.kubeconfig import load_kubeconfig


@pytest.fixture(autouse=True)
def _private_umask() -> Iterator[None]:
    """Kubeconfigs written here carry credentials: made 0600, as the secret rules want
    (test_secret_files_are_refused_when_exposed proves the refusal)."""
    old = os.umask(0o077)
    yield
    os.umask(old)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApi]:
    server = FakeApi(tmp_path_factory.mktemp("kube-api"), Cluster())
    yield server
    server.close()


def _doc(api: FakeApi, tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    doc = json.loads(api.kubeconfig(tmp_path / "kubeconfig", **kwargs).read_text())
    assert isinstance(doc, dict)
    return doc


def test_inline_files_and_token(api: FakeApi, tmp_path: Path) -> None:
    inline = load_kubeconfig(api.kubeconfig(tmp_path / "a", inline=True))
    assert inline.client_cert_pem == api.client_cert.read_bytes() and inline.token is None
    files = load_kubeconfig(api.kubeconfig(tmp_path / "b", inline=False))
    assert files.client_key_pem == api.client_key.read_bytes()
    token = load_kubeconfig(api.kubeconfig(tmp_path / "c", token=True))
    assert token.token == TOKEN and token.client_cert_pem is None
    assert (inline.host, inline.port, inline.prefix) == ("127.0.0.1", api.port, "")
    for access in (inline, files, token):
        access.tls_context()  # loads


def test_relative_paths_are_relative_to_the_kubeconfig(api: FakeApi, tmp_path: Path) -> None:
    doc = _doc(api, tmp_path, inline=False)
    pki = tmp_path / "kubelet" / "pki"
    pki.mkdir(parents=True)
    (pki / "client.pem").write_bytes(api.client_cert.read_bytes())
    (pki / "client-key.pem").write_bytes(api.client_key.read_bytes())
    (pki / "client-key.pem").chmod(0o640)  # group read is fine (Puppet's keys are 0640)
    doc["users"][0]["user"] = {
        "client-certificate": "pki/client.pem",
        "client-key": "pki/client-key.pem",
    }
    path = tmp_path / "kubelet" / "kubelet.conf"
    path.write_text(json.dumps(doc))
    assert load_kubeconfig(path).client_cert_pem == api.client_cert.read_bytes()


REFUSED: list[tuple[str, Any, str]] = [
    ("clusters.0.cluster.insecure-skip-tls-verify", True, "insecure-skip-tls-verify"),
    ("users.0.user.exec", {"command": "/bin/evil"}, "users[node].exec"),
    ("users.0.user.auth-provider", {"name": "gcp"}, "auth-provider"),
    ("clusters.0.cluster.server", "http://127.0.0.1:6443", "server"),
    ("clusters.0.cluster.certificate-authority-data", "@@not base64@@", "not base64"),
    ("users.0.user", {}, "no credentials"),
    ("users.0.user", {"client-certificate-data": "QQ=="}, "go together"),
    ("current-context", "elsewhere", "no entry named 'elsewhere'"),
    ("users.0.user.client-key-data", base64.b64encode(b"junk").decode(), "do not load"),
]


def _set(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, last = dotted.split(".")
    here: Any = doc
    for part in parents:
        here = here[int(part)] if part.isdigit() else here[part]
    here[int(last) if last.isdigit() else last] = value
    return doc


@pytest.mark.parametrize(("where", "value", "needle"), REFUSED)
def test_refused_kubeconfigs(
    api: FakeApi, tmp_path: Path, where: str, value: Any, needle: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(_set(_doc(api, tmp_path), where, value)))
    with pytest.raises(ConfigError) as caught:
        load_kubeconfig(path).tls_context()
    assert needle in str(caught.value) and str(path) in str(caught.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=12,
)
PLACES = [
    "current-context", "clusters", "clusters.0", "clusters.0.name", "clusters.0.cluster",
    "clusters.0.cluster.server", "clusters.0.cluster.certificate-authority-data",
    "clusters.0.cluster.certificate-authority", "clusters.0.cluster.tls-server-name",
    "users", "users.0.user", "users.0.user.token", "users.0.user.tokenFile",
    "users.0.user.client-certificate", "users.0.user.client-key-data",
    "contexts", "contexts.0.context", "contexts.0.context.cluster", "contexts.0.context.user",
]  # fmt: skip


@given(changes=st.lists(st.tuples(st.sampled_from(PLACES), json_values), min_size=1, max_size=3))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_hostile_values_are_one_line(
    api: FakeApi, tmp_path: Path, changes: list[tuple[str, Any]]
) -> None:
    doc = _doc(api, tmp_path)
    for where, value in changes:
        with contextlib.suppress(KeyError, IndexError, TypeError):  # a parent was replaced
            doc = _set(doc, where, value)
    path = tmp_path / "hostile"
    path.write_text(json.dumps(doc))
    try:
        load_kubeconfig(path).tls_context()
    except TyphapkiError as exc:
        assert exc.exit_code == EXIT_USAGE
        assert "\n" not in str(exc) and str(exc).startswith(str(path)), str(exc)


@given(
    text=st.text(max_size=200)
    | st.sampled_from(["- [", "a: &x [*x]", "!!python/object:os.system x", "{" * 100])
)
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_garbage_files_are_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "garbage"
    path.write_text(text)
    with pytest.raises(TyphapkiError) as caught:
        load_kubeconfig(path)
    assert "\n" not in str(caught.value)


def test_the_cli_names_the_kubeconfig(api: FakeApi, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / ".restart-typha").write_text("pending\n")
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(_set(_doc(api, tmp_path), "users.0.user.exec", {"command": "x"})))
    result = run_cli("restart-typha", "--out", out, "--kubeconfig", path, "--node", "node-a")
    assert_one_line_error(result, 2, str(path), "exec")
    assert (out / ".restart-typha").exists()


@given(
    holder=st.sampled_from(["client-key", "tokenFile", "inline key", "inline token"]),
    mode=st.integers(0o400, 0o777),
    foreign=st.booleans(),
)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_secret_files_are_refused_when_exposed(
    api: FakeApi, tmp_path: Path, holder: str, mode: int, foreign: bool
) -> None:
    """The client key file, the token file, and the kubeconfig itself when it holds
    the key or the token: owned by root or us, nothing for others, no group write
    (the rules of every secret typhapki reads, docs/security.md)."""
    doc = _doc(api, tmp_path, inline=holder == "inline key", token=holder == "inline token")
    path = tmp_path / "kubeconfig"
    secret = path
    if holder == "client-key":
        secret = tmp_path / "client-key.pem"
        secret.write_bytes(api.client_key.read_bytes())
        doc["users"][0]["user"]["client-key"] = str(secret)
    elif holder == "tokenFile":
        secret = tmp_path / "token"
        secret.write_text(TOKEN + "\n")
        doc["users"][0]["user"] = {"tokenFile": "token"}
    path.write_text(json.dumps(doc))
    secret.chmod(mode)
    os.chown(secret, 4242 if foreign else 0, -1)
    fine = not foreign and not mode & 0o027
    try:
        access = load_kubeconfig(path)
    except ConfigError as exc:
        assert not fine, exc
        message = str(exc)
        assert message.startswith(str(path)) and str(secret) in message, message
        assert ("owned by uid 4242" if foreign else "chmod") in message, message
    else:
        assert fine, oct(mode)
        assert access.token == TOKEN or access.client_key_pem == api.client_key.read_bytes()
