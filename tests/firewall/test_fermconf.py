"""typhapki/firewall/fermconf.py: which files ferm loads, proved against real ferm.

Generated layouts of includes (files, directories, relative and absolute names, quoted
and bare, hidden and backup names, comments) are handed to `ferm --noexec --lines`;
whether ferm read the target is seen in its output (the target's rule), and
`loads` must say the same.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SERVER_EXAMPLES_IN_CI, require, run_cli
from typhapki.firewall.fermconf import check_loaded, loads

MARK = "proto tcp dport 5999 ACCEPT;"  # the target's rule, seen in ferm's output
DIRS = ("ferm.d", "conf.d", "sub/deeper")
NAMES = ("10_calico-typha", ".hidden", "backup~", "x.dpkg-old", "20_rule")


Include = tuple[str, bool, str, bool]  # name, absolute, quote, commented out


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[Include], str, str]:
    """(include lines of ferm.conf, target's directory, target's name)."""
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(DIRS)) + "/"
        absolute = draw(st.booleans())
        quote = draw(st.sampled_from(["", "'", '"']))
        commented = draw(st.booleans())
        lines.append((name, absolute, quote, commented))
    return lines, draw(st.sampled_from(DIRS)), draw(st.sampled_from(NAMES))


def _write(
    base: Path, lines: list[Include], target_dir: str, target_name: str
) -> tuple[Path, Path]:
    etc = base / "etc" / "ferm"
    for d in DIRS:
        (etc / d).mkdir(parents=True, exist_ok=True)
    text = ["domain ip table filter chain INPUT policy ACCEPT;"]
    for name, absolute, quote, commented in lines:
        path = (
            str(etc / name) + ("/" if not str(etc / name).endswith("/") else "")
            if absolute
            else name
        )
        text.append(("# " if commented else "") + f"@include {quote}{path}{quote};")
    conf = etc / "ferm.conf"
    conf.write_text("\n".join(text) + "\n")
    target = etc / target_dir / target_name
    target.write_text(f"domain ip table filter chain INPUT {MARK}\n")
    return conf, target


@settings(
    max_examples=SERVER_EXAMPLES_IN_CI,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(layouts())
def test_loads_says_what_real_ferm_reads(tmp_path_factory, layout) -> None:  # type: ignore[no-untyped-def]
    require("ferm")
    conf, target = _write(tmp_path_factory.mktemp("ferm"), *layout)
    proc = subprocess.run(
        ["ferm", "--noexec", "--lines", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert loads(conf, target) is ("--dport 5999" in proc.stdout)


def test_an_output_ferm_never_loads_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    conf, target = _write(tmp_path, [("ferm.d/", False, "", False)], "conf.d", "10_calico-typha")
    target.unlink()
    args = [
        "ferm",
        "--hiera",
        "hiera_sample",
        "--cluster",
        "staging-eqiad",
        "--nameserver",
        "127.0.0.1:9",
        "--timeout",
        "0.2",
        "--ferm-conf",
        str(conf),
    ]
    refused = run_cli(*args, "--output", str(target))
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert f"{conf} does not include {target.parent}/" in refused.stderr
    assert str(conf.parent / "ferm.d") + "/" in refused.stderr
    assert not target.exists()
    # Included: the command goes on to its DNS gate (which fails here, exit 1).
    assert run_cli(*args, "--output", str(conf.parent / "ferm.d" / "x")).returncode == 1


def test_outputs_outside_its_directory_and_includes_it_cannot_follow_pass(tmp_path: Path) -> None:
    conf, target = _write(tmp_path, [], "conf.d", "r")
    check_loaded(tmp_path / "elsewhere" / "r", conf)  # not ferm.conf's directory: no verdict
    conf.write_text("@include '$DIR/';\n")
    assert loads(conf, target) is None
    check_loaded(target, conf)
    check_loaded(target, tmp_path / "missing.conf")
