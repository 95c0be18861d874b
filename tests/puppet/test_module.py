"""The Puppet module's own gates, run from pytest so CI runs them: puppet-lint with no
warnings, `puppet parser validate` / `puppet epp validate` on every file, rspec-puppet
compiling every class in every mode, and puppet-strings documentation of every
parameter, which README.md lists too and REFERENCE.md is generated from."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import LEG, require
from tests.support.puppet import MODULE, SYSTEM_MODULES

# Heavy end to end: the Debian leg, and the trixie leg for its Puppet 8 components.
pytestmark = pytest.mark.once("debian", "trixie")


def _run(
    *cmd: str | Path, cwd: Path = MODULE, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        # puppet-lint's autoloader check reads $PWD: it must be the module's directory.
        env={**os.environ, "TYPHAPKI_CONFIG": "", "PWD": str(cwd)},
    )


def _files(*patterns: str) -> list[Path]:
    return sorted(p for pattern in patterns for p in MODULE.glob(pattern))


def test_puppet_lint_has_no_warnings() -> None:
    require("puppet-lint")
    proc = _run("puppet-lint", "--fail-on-warnings", "manifests", "types", "functions", "examples")
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout + proc.stderr


def test_every_manifest_and_template_validates() -> None:
    require("puppet")
    manifests = _files("manifests/**/*.pp", "types/**/*.pp", "functions/*.pp", "examples/*.pp")
    assert len(manifests) >= 12
    proc = _run("puppet", "parser", "validate", *manifests)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    templates = _files("templates/*.epp")
    proc = _run("puppet", "epp", "validate", *templates)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_metadata_names_the_module_and_its_dependency() -> None:
    meta = json.loads((MODULE / "metadata.json").read_text())
    assert meta["name"].endswith("-typhapki")
    assert [d["name"] for d in meta["dependencies"]] == ["puppetlabs/stdlib"]


def test_rspec_puppet() -> None:
    require("rspec", "puppet")
    assert (SYSTEM_MODULES / "stdlib").is_dir(), "puppet-module-puppetlabs-stdlib"
    proc = _run("rspec", "spec/classes", "spec/defines", "spec/type_aliases", timeout=1200)
    tail = "\n".join(proc.stdout.splitlines()[-40:])
    assert proc.returncode == 0, tail + proc.stderr
    counts = re.search(r"(\d+) examples, 0 failures", proc.stdout)
    assert counts and int(counts.group(1)) > 150, tail


def _strings() -> dict[str, list[dict[str, object]]]:
    require("puppet")
    proc = _run(
        "puppet",
        "strings",
        "generate",
        "--format",
        "json",
        *_files("manifests/**/*.pp", "types/**/*.pp"),
    )
    assert proc.returncode == 0, proc.stderr
    start = proc.stdout.index("{")
    data = json.loads(proc.stdout[start:])
    assert isinstance(data, dict)
    return data


def test_every_class_and_parameter_is_documented_here_and_in_the_readme() -> None:
    data = _strings()
    readme = (MODULE / "README.md").read_text()
    entries = data["puppet_classes"] + data["defined_types"]
    names = {str(e["name"]) for e in entries}
    assert names >= {"typhapki", "typhapki::certs", "typhapki::ferm", "typhapki::restart"}
    # typhapki::certs dispatches to one class per issuance mode.
    assert names >= {f"typhapki::certs::{mode}" for mode in ("local", "shipped", "cfssl")}
    for entry in entries:
        name = str(entry["name"])
        doc = entry["docstring"]
        assert isinstance(doc, dict)
        tags = doc.get("tags", [])
        assert isinstance(tags, list)
        assert any(t["tag_name"] == "summary" for t in tags), name
        documented = {t["name"] for t in tags if t["tag_name"] == "param" and t.get("text")}
        signature = re.match(
            r"(?:class|define) [\w:]+\s*\((.*?)\n\)\s*\{", str(entry["source"]), re.S
        )
        # One parameter a line: `Type $name` (a default may name other variables).
        declared = signature.group(1) if signature else ""
        params = set(re.findall(r"^\s+[A-Z][^$\n]*\$(\w+)", declared, re.M))
        assert params <= documented, (name, params - documented)
        assert name not in ("typhapki", "typhapki::certs") or len(params) > 15, (name, params)
        assert f"`{name}`" in readme, name
        # Its README section lists its parameters, or says it has none and what it reads.
        section = readme.split(f"### `{name}`\n", 1)[1].split("\n### ", 1)[0]
        assert params or "No parameters of its own" in section, (name, section)
        assert not params or "| hiera key / parameter |" in section, name
        for param in params:
            # Classes: the hiera key of automatic parameter lookup; the define: the name.
            key = param if name == "typhapki::restart" else f"{name}::{param}"
            assert f"`{key}`" in readme, (name, key)
    aliases = {str(a["name"]) for a in data["data_type_aliases"]}
    assert aliases >= {
        "Typhapki::Mode",
        "Typhapki::Role",
        "Typhapki::KeyType",
        "Typhapki::FermMode",
        "Typhapki::FermStyle",
        "Typhapki::DnsGate",
        "Typhapki::Certs::Settings",
        "Typhapki::Certs::Local",
        "Typhapki::Certs::Shipped",
        "Typhapki::Certs::Cfssl",
    }
    for alias in aliases:
        assert f"`{alias}`" in readme, alias


def _headings(markdown: str) -> list[str]:
    """The headings of a REFERENCE.md, without the anchors each puppet-strings release
    spells its own way (4.x: `<a name="-typhapki--role">`; bookworm's: `"role"`)."""
    return [
        re.sub(r'<a name="[^"]*"></a>', "", line)
        for line in markdown.splitlines()
        if line.startswith("#")
    ]


def test_reference_md_is_what_puppet_strings_generates(tmp_path: Path) -> None:
    """Every file parses for puppet-strings (a file it cannot parse is silently left out
    of REFERENCE.md: trixie's 4.x once dropped typhapki::nftables over a `$apply`), and
    REFERENCE.md is its output: byte for byte from the release that wrote it (bookworm's,
    in the Debian leg), the same headings from trixie's, which formats the rest anew."""
    require("puppet")
    out = tmp_path / "REFERENCE.md"
    proc = _run("puppet", "strings", "generate", "--format", "markdown", "--out", out)
    assert proc.returncode == 0, proc.stderr
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "[error]" in line]
    assert errors == [], errors
    committed, generated = (MODULE / "REFERENCE.md").read_text(), out.read_text()
    stale = (
        "stale: cd puppet/typhapki && puppet strings generate --format markdown --out REFERENCE.md"
    )
    if LEG == "trixie":
        assert _headings(committed) == _headings(generated), stale
    else:
        assert committed == generated, stale
