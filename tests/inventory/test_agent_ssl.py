"""`--cfssl-client-cert puppet`: the agent's paths from puppet.conf, never from Ruby."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from typhapki.errors import EXIT_USAGE, ConfigError
from typhapki.inventory.agent_ssl import AIO_CONF, agent_ssl, parse_conf, resolve

NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z0-9]{1,10}){0,3}", fullmatch=True)
DIRS = st.from_regex(r"(/[A-Za-z0-9_.-]{1,12}){1,4}", fullmatch=True)
CONF = Path("/etc/puppet/puppet.conf")


@given(certname=NAMES, ssldir=DIRS, fqdn=NAMES)
def test_hostcert_follows_ssldir_and_certname(certname: str, ssldir: str, fqdn: str) -> None:
    text = (
        f"[main]\nssldir = {ssldir}\n[server]\ncertname = puppet\n[agent]\ncertname = {certname}\n"
    )
    agent = resolve(parse_conf(text, CONF), CONF, fqdn=fqdn)
    assert agent.hostcert == Path(ssldir, "certs", f"{certname}.pem")
    assert agent.hostprivkey == Path(ssldir, "private_keys", f"{certname}.pem")
    assert agent.localcacert == Path(ssldir, "certs", "ca.pem")
    # Without a certname, the FQDN in lower case; without an ssldir, Debian's.
    bare = resolve({}, CONF, fqdn=fqdn.upper())
    assert bare.hostcert == Path("/var/lib/puppet/ssl/certs", f"{fqdn}.pem")
    assert resolve({}, AIO_CONF, fqdn=fqdn, aio=True).localcacert == Path(
        "/etc/puppetlabs/puppet/ssl/certs/ca.pem"
    )


@given(ssldir=DIRS, name=NAMES)
def test_explicit_settings_and_variables(ssldir: str, name: str) -> None:
    text = (
        f"ssldir = {ssldir}\n[agent]\nhostcert = ${{ssldir}}/mine/{name}.crt\n"
        f"hostprivkey = $privatekeydir/{name}.key\nlocalcacert = $confdir/ca.pem\n"
    )
    agent = resolve(parse_conf(text, CONF), CONF, fqdn="node.example")
    assert agent.hostcert == Path(f"{ssldir}/mine/{name}.crt")
    assert agent.hostprivkey == Path(f"{ssldir}/private_keys/{name}.key")
    assert agent.localcacert == Path("/etc/puppet/ca.pem")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[agent]\nhostcert = $environment/x.pem\n", "$environment"),
        ("[agent]\nhostcert = certs/x.pem\n", "not an absolute path"),
        ("[agent\n", "malformed section header"),
        ("[main]\njust words\n", "expected NAME = VALUE"),
    ],
)
def test_what_cannot_be_resolved_names_the_file(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(parse_conf(text, CONF), CONF, fqdn="node.example")
    assert str(CONF) in str(caught.value) and needle in str(caught.value)


def test_the_environment_names_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "puppet.conf"
    conf.write_text("[agent]\nssldir = /srv/ssl\ncertname = kube1\n")
    agent = agent_ssl({"TYPHAPKI_PUPPET_CONF": str(conf)})
    assert (agent.hostcert, agent.source) == (Path("/srv/ssl/certs/kube1.pem"), str(conf))


def fake_puppet(bin_dir: Path, marker: Path) -> dict[str, str]:
    """A `puppet` (and `ruby`) first on PATH that leaves a mark if anything runs it."""
    bin_dir.mkdir()
    for name in ("puppet", "ruby", "facter"):
        exe = bin_dir / name
        exe.write_text(f"#!/bin/sh\necho {name} >> {marker}\nexit 1\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _agent_without_files(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A node whose puppet.conf names an empty ssldir (the agent never ran), with fake
    puppet/ruby/facter first on PATH: its ssldir, their marker, the environment."""
    ssl = tmp_path / "ssl"
    (ssl / "certs").mkdir(parents=True)
    (ssl / "private_keys").mkdir()
    conf = tmp_path / "puppet.conf"
    conf.write_text(f"[main]\nssldir = {ssl}\ncertname = kube1.example\n")
    marker = tmp_path / "ran"
    return ssl, marker, {**fake_puppet(tmp_path / "bin", marker), "TYPHAPKI_PUPPET_CONF": str(conf)}


def test_check_and_issue_never_run_puppet_and_refuse_a_bad_key(tmp_path: Path) -> None:
    ssl, marker, env = _agent_without_files(tmp_path)
    flags = (
        "--role", "felix", "--signer", "cfssl", "--cfssl-url", "https://127.0.0.1:9",
        "--cfssl-client-cert", "puppet",
    )  # fmt: skip
    # No localcacert yet (the agent never ran): the front's trust is missing, exit 2.
    for verb in ("check", "issue"):
        result = run_cli(verb, "--out", tmp_path / "out", *flags, env=env)
        assert_one_line_error(
            result, EXIT_USAGE, str(ssl / "certs" / "ca.pem"), "(from puppet.conf's localcacert"
        )
    assert not marker.exists()
    # With a CA file and a certificate but no key: the key is named, before any request.
    (ssl / "certs" / "ca.pem").write_bytes(_a_cert())
    (ssl / "certs" / "kube1.example.pem").write_bytes(_a_cert())
    result = run_cli("issue", "--out", tmp_path / "out", *flags, env=env)
    assert_one_line_error(
        result, EXIT_USAGE, "cfssl client key", str(ssl / "private_keys" / "kube1.example.pem"),
        "(from puppet.conf's hostprivkey; cfssl_client_cert 'puppet' from --cfssl-client-cert)",
    )  # fmt: skip
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert not marker.exists()


def _a_cert() -> bytes:
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Puppet CA")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_fleet_reads_the_agent_identity_without_puppet_and_names_missing_files(
    tmp_path: Path,
) -> None:
    """`fleet --puppetdb-cert puppet` resolves the agent's files as cfssl's `puppet`
    does (puppet.conf, no Ruby), and a file the agent has not made yet is named."""
    ssl, marker, env = _agent_without_files(tmp_path)
    args = ("fleet", "--puppetdb", "https://127.0.0.1:9", "--puppetdb-cert", "puppet")
    result = run_cli(*args, env=env)
    assert_one_line_error(result, EXIT_USAGE, "--puppetdb-ca", str(ssl / "certs" / "ca.pem"))
    (ssl / "certs" / "ca.pem").write_bytes(_a_cert())
    result = run_cli(*args, env=env)
    assert_one_line_error(result, EXIT_USAGE, str(ssl / "certs" / "kube1.example.pem"))
    assert not marker.exists()


# A certname names files ($certname.pem): anything but a plain name is refused.
SEPARATORS = st.sampled_from(["/", "/../", "\\", "/./"])
ODD = ["..", ".", "../../etc/shadow", "-rf", ".hidden", "Upper.example", "a b", "tab\tname",
       "new\nline", "esc\x1b[2J", "nul\x00", "\u202eevil", "caf\u00e9", "a..b"]  # fmt: skip
NOT_PLAIN = st.builds(lambda a, sep, b: a + sep + b, NAMES, SEPARATORS, NAMES) | st.sampled_from(
    ODD
)


@given(certname=NOT_PLAIN, fqdn=st.booleans())
def test_a_certname_that_is_not_a_plain_name_is_refused(certname: str, fqdn: bool) -> None:
    """From puppet.conf or from the FQDN: one line naming puppet.conf, escaped."""
    assume(not fqdn or certname != "Upper.example")  # Puppet lower-cases the FQDN
    settings = {} if fqdn else {"certname": certname}
    with pytest.raises(ConfigError) as caught:
        resolve(settings, CONF, fqdn=certname if fqdn else "node.example")
    message = str(caught.value)
    assert message.startswith(f"{CONF}: certname") and "not a plain name" in message
    assert message.isprintable(), message


@given(certname=NAMES | st.sampled_from(["kube_1.example", "a", "1.2.3.4", "x-"]))
def test_plain_certnames_are_kept(certname: str) -> None:
    assert resolve({"certname": certname}, CONF).certname == certname


@pytest.mark.parametrize(
    ("mode", "owner", "needle"),
    [(0o644, 0, "lets others read or write it"), (0o660, 0, "lets its group write it"),
     (0o600, 4242, "owned by uid 4242"), (0o640, 0, None), (0o640, "puppet", None)],
)  # fmt: skip
def test_fleet_holds_the_agent_key_to_the_rules_of_a_secret(
    tmp_path: Path, mode: int, owner: int | str, needle: str | None
) -> None:
    """`--puppetdb-cert puppet`: the agent's hostprivkey gets the owner and mode rules of
    every secret typhapki reads (Puppet's own: 0640, owned by its service user, passes)."""
    import pwd

    from tests.support.cfssl import _tls_files

    if isinstance(owner, str):
        try:
            owner = pwd.getpwnam(owner).pw_uid
        except KeyError:
            pytest.skip("no puppet user on this machine (puppet is not installed)")

    ssl, marker, env = _agent_without_files(tmp_path)
    (tmp_path / "pair").mkdir()
    ca, cert, key = _tls_files(tmp_path / "pair")
    hostkey = ssl / "private_keys" / "kube1.example.pem"
    (ssl / "certs" / "ca.pem").write_bytes(ca.read_bytes())
    (ssl / "certs" / "kube1.example.pem").write_bytes(cert.read_bytes())
    hostkey.write_bytes(key.read_bytes())
    hostkey.chmod(mode)
    os.chown(hostkey, owner, -1)
    args = ("fleet", "--puppetdb", "https://127.0.0.1:9", "--puppetdb-cert", "puppet")
    result = run_cli(*args, "--puppetdb-timeout", "5", env=env)
    if needle is None:  # the key is fine: PuppetDB (nobody on port 9) is what fails
        assert_one_line_error(result, 8, "unreachable")
    else:
        assert_one_line_error(result, EXIT_USAGE, "hostprivkey", str(hostkey), needle)
    assert not marker.exists()
