"""Every resolved PKI value remembers where it came from: a bad one is refused in one
line that names its source, a flag, the node configuration file or hiera
(typhapki/settings/pki.py, typhapki/nodeconfig.py, typhapki/settings/cluster.py).

The console script's own main() runs in this process, on the fast path
(typhapki/fastcli.py) and on typer's (typhapki/cli.py) alike.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.sources import HIERA, SOURCES, place
from typhapki import entry

# Values the PKI layer refuses whatever else is set (the leaf lifetime stays 365 days,
# and a local CA is named: a renewal window is judged against the signer's lifetime).
BAD = {
    "renew_before": ["400d", "soon", "0", "12 parsecs"],
    "key_type": ["rsa-1024", "dsa", "ECDSA"],
    "key_mode": ["0666", "abc", "0700", "17777"],
    "typha_cn": ["x" * 65, "y" * 200],
    "felix_uri_san": ["not a uri", "spiffe://"],
}


def run_main(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    err = io.StringIO()
    with (
        mock.patch.dict(os.environ, env),
        mock.patch.object(sys, "argv", ["typhapki", *argv]),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        code = entry.main()
    return code, err.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    option=st.sampled_from(sorted(BAD)),
    pick=st.integers(0, 3),
    source=st.sampled_from(SOURCES),
    command=st.sampled_from(["check", "issue"]),
    fast=st.booleans(),
    dashes=st.booleans(),
)
def test_a_bad_value_is_refused_naming_its_source(
    tmp_path_factory: pytest.TempPathFactory,
    option: str,
    pick: int,
    source: str,
    command: str,
    fast: bool,
    dashes: bool,
) -> None:
    value = BAD[option][pick % len(BAD[option])]
    base = tmp_path_factory.mktemp("node")
    flag = "--" + option.replace("_", "-")
    key = option.replace("_", "-") if dashes else option
    config, hiera = place(base, source, command, key, option, value)
    argv = [command, "--out", str(base / "out"), "--hiera", str(hiera), "--cluster", "prod"]
    argv += ["--ca-dir", str(base / "ca")]
    if source == "flag":
        argv += [flag, value]
    env = {"TYPHAPKI_CONFIG": str(config), "TYPHAPKI_NO_FAST_PATH": "" if fast else "1"}
    code, stderr = run_main(argv, env)
    expected = {
        "flag": f"(from {flag})",
        "defaults": f"(from {config}: defaults.{key})",
        "commands": f"(from {config}: commands.{command}.{key})",
        "hiera": f"(from hiera {hiera}:",
    }[source]
    lines = stderr.splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("typhapki: error: "), stderr
    assert f"{option} {value!r} {expected}" in lines[0], (lines[0], expected)
    if source == "hiera":
        assert f"kubernetes::clusters.main.prod.typha.{option})" in lines[0]
    assert not (base / "out").exists()  # refused before anything is written


@pytest.mark.parametrize("fast", [True, False])
def test_a_flag_wins_and_is_named_over_the_file_and_hiera(
    tmp_path: Path, ca_dir: Path, fast: bool
) -> None:
    config, hiera = tmp_path / "typhapki.yaml", tmp_path / "hiera.yaml"
    config.write_text("defaults:\n  renew_before: 30d\n")
    config.chmod(0o600)
    hiera.write_text(HIERA.format(key="renew_before", value="20d"))
    argv = ["check", "--out", str(tmp_path / "out"), "--hiera", str(hiera), "--cluster", "prod"]
    argv += ["--ca-dir", str(ca_dir)]  # the local CA's lifetime judges the renewal window
    env = {"TYPHAPKI_CONFIG": str(config), "TYPHAPKI_NO_FAST_PATH": "" if fast else "1"}
    code, stderr = run_main([*argv, "--renew-before", "500d"], env)
    assert code == 2
    assert "renew_before '500d' (from --renew-before)" in stderr
    # Without the flag the file's value is the one judged (valid here): no error.
    code, stderr = run_main(argv, env)
    assert "typhapki: error" not in stderr, stderr
