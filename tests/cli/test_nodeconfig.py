"""The node configuration file: every option defaults from it, flags win, facts never fail."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from typhapki import options
from typhapki.cli import nodeconfig
from typhapki.errors import ConfigError, UsageError
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import subject_cn

HIERA = """\
kubernetes::clusters:
  main:
    lab:
      cluster_nodes: [192.0.2.10, 192.0.2.11, "2001:db8::11"]
      typha:
        typha_cn: typha-lab
        felix_cn: felix-lab
"""


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "typhapki.yaml"
    path.write_text(text)
    return {"TYPHAPKI_CONFIG": str(path)}


@pytest.fixture
def node(tmp_path: Path, ca_dir: Path) -> dict[str, str]:
    """A node configured the way the Puppet module writes it."""
    hiera = tmp_path / "cluster.yaml"
    hiera.write_text(HIERA)
    return _config(
        tmp_path,
        f"""\
# written by Puppet (typhapki::config)
version: 1
defaults:
  out: {tmp_path / "out"}
  ca_dir: {ca_dir}
  role: both
  hiera: {hiera}
  cluster: lab
  key_mode: 0640
commands:
  ferm:
    output: {tmp_path / "10_calico-typha"}
  facts:
    ferm_output: {tmp_path / "10_calico-typha"}
""",
    )


def test_issue_and_check_with_no_flags_do_what_the_puppet_exec_does(
    node: dict[str, str], tmp_path: Path, ca_dir: Path
) -> None:
    assert run_cli("check", "--quiet", env=node).returncode == 1  # nothing issued yet
    issued = run_cli("issue", env=node)
    assert issued.returncode == 0, issued.stderr
    paths = SetPaths(tmp_path / "out")
    typha = load_certs(paths.cert(RoleName.TYPHA), "typha")[0]
    assert subject_cn(typha) == "typha-lab"  # hiera and cluster came from the file
    assert paths.key(RoleName.FELIX).stat().st_mode & 0o777 == 0o640  # "0640" stayed text
    assert run_cli("check", "--quiet", env=node).returncode == 0
    # The same set judged with the same options given as flags, without the file.
    flags: list[str | Path] = [
        *("--out", tmp_path / "out", "--ca-dir", ca_dir, "--key-mode", "0640"),
        *("--hiera", tmp_path / "cluster.yaml", "--cluster", "lab"),
    ]
    assert run_cli("check", "--quiet", *flags, env={"TYPHAPKI_CONFIG": ""}).returncode == 0
    # A flag wins over the file.
    flagged = run_cli("check", "--typha-cn", "other", env=node)
    assert flagged.returncode == 1
    assert "'other'" in flagged.stdout
    assert "nothing changed" in run_cli("issue", env=node).stdout


def test_required_options_come_from_the_file(node: dict[str, str], tmp_path: Path) -> None:
    # ferm's --hiera and --cluster are required: the file satisfies them.
    written = run_cli("ferm", env=node)
    assert written.returncode == 0, written.stderr
    rule = (tmp_path / "10_calico-typha").read_text()
    assert "192.0.2.11" in rule and "2001:db8::11" in rule
    assert run_cli("ferm", "--check", env=node).returncode == 0
    # ...and a flag still wins: another output is not up to date.
    other = run_cli("ferm", "--check", "--output", tmp_path / "elsewhere", env=node)
    assert other.returncode == 1


def test_the_fact_reads_the_file_too(node: dict[str, str], tmp_path: Path) -> None:
    assert run_cli("issue", env=node).returncode == 0
    assert run_cli("ferm", env=node).returncode == 0
    fact = json.loads(run_cli("facts", env=node).stdout)["typhapki"]
    assert fact["ok"] is True, fact["error"]
    assert fact["set"]["out"] == str(tmp_path / "out")
    assert fact["set"]["roles"]["typha"]["common_name"] == "typha-lab"
    assert fact["ferm"]["exists"] is True


def test_ca_init_takes_nothing_from_defaults(tmp_path: Path) -> None:
    env = _config(tmp_path, f"defaults:\n  ca_dir: {tmp_path / 'ca'}\n  days: 30\n")
    result = run_cli("ca", "init", env=env)
    assert result.returncode == 2  # --ca-dir is not defaulted for `ca init`
    assert "--ca-dir" in result.stderr
    assert not (tmp_path / "ca").exists()


def test_no_file_means_no_defaults(tmp_path: Path) -> None:
    assert nodeconfig.config_path({}) == nodeconfig.DEFAULT_PATH
    assert nodeconfig.config_path({"TYPHAPKI_CONFIG": ""}) is None
    assert nodeconfig.config_path({"TYPHAPKI_CONFIG": "/x.yaml"}) == Path("/x.yaml")
    missing = tmp_path / "absent.yaml"
    assert nodeconfig.load(missing) == nodeconfig.NodeConfig()
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "gone")
    with pytest.raises(ConfigError, match=r"dangling\.yaml"):
        nodeconfig.load(dangling)  # there, but unreadable: an error
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert nodeconfig.default_map(nodeconfig.load(empty)) == {}


BAD = {
    "not yaml": ("defaults: [unclosed\n", "not valid YAML"),
    "a list": ("- out\n", "expected a mapping"),
    "unknown top key": ("default:\n  out: /x\n", "'default'"),
    "version": ("version: 2\n", "version"),
    "unknown option": ("defaults:\n  ca_dri: /x\n", "defaults.ca_dri"),
    "unknown command": ("commands:\n  isue:\n    out: /x\n", "'isue'"),
    "option of another command": ("commands:\n  check:\n    output: /x\n", "commands.check.output"),
    "bad number": ("defaults:\n  days: soon\n", "defaults.days"),
    "bad flag": ("commands:\n  ferm:\n    check: maybe\n", "commands.ferm.check"),
    "mapping value": ("defaults:\n  out: {a: b}\n", "defaults.out"),
    "list for one value": ("defaults:\n  out: [/a, /b]\n", "defaults.out"),
    # --skip-mtls-proof is for one run typed by hand (docs/ferm.md "The mTLS proof").
    "flag only": ("commands:\n  ferm:\n    skip_mtls_proof: true\n", "a flag only"),
    "flag only as default": ("defaults:\n  skip-mtls-proof: 'false'\n", "defaults.skip-mtls-proof"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_line_naming_it(case: str, tmp_path: Path) -> None:
    text, needle = BAD[case]
    env = _config(tmp_path, text)
    result = run_cli("check", "--out", tmp_path / "out", env=env)
    assert_one_line_error(result, 2, str(tmp_path / "typhapki.yaml"), needle)
    # The fact never fails: the error is in it, exit 0, valid JSON.
    facts = run_cli("facts", "--out", tmp_path / "out", env=env)
    assert facts.returncode == 0, facts.stderr
    fact = json.loads(facts.stdout)["typhapki"]
    assert fact["ok"] is False
    assert str(tmp_path / "typhapki.yaml") in fact["error"]
    # --help still helps.
    assert run_cli("check", "--help", env=env).returncode == 0


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "typhapki.yaml"
    os.mkfifo(fifo)
    result = run_cli("check", "--out", tmp_path, env={"TYPHAPKI_CONFIG": str(fifo)}, timeout=30)
    assert_one_line_error(result, 2, str(fifo), "FIFO")


def test_option_long_names_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "defaults:\n  ca-dir: /ca\n  json: true\ncommands:\n  manifests:\n    format: operator\n"
    )
    dm = nodeconfig.default_map(nodeconfig.load(path))
    assert dm["issue"]["ca_dir"] == "/ca"
    assert dm["issue"]["json_out"] == "true"
    assert dm["manifests"]["fmt"] == "operator"
    assert "init" not in dm.get("ca", {})


# Options of `issue` with values click accepts, as a node file would hold them.
ISSUE_VALUES = {
    "out": st.just("/srv/pki"),
    "ca_dir": st.just("/etc/typhapki/ca"),
    "role": st.sampled_from(["typha", "felix", "both"]),
    "typha_cn": st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    "days": st.integers(1, 10_000).map(str),
    "key_mode": st.sampled_from(["0600", "0640", "0400"]),
    "trust": st.lists(st.just("/etc/typhapki/old.crt"), max_size=2),
}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.fixed_dictionaries({}, optional=ISSUE_VALUES))
def test_defaults_reach_every_command_that_has_the_option(
    values: dict[str, object], tmp_path: Path
) -> None:
    import yaml

    path = tmp_path / "gen.yaml"
    path.write_text(yaml.safe_dump({"defaults": values}))
    dm = nodeconfig.default_map(nodeconfig.load(path))
    for cmd_path, command in nodeconfig._commands():
        given_here = dm
        for part in cmd_path:
            given_here = given_here.get(part, {})
        names = {o.name for o in command.options}
        for key, value in values.items():
            if cmd_path in nodeconfig.NO_DEFAULTS or key not in names:
                assert key not in given_here
            else:
                assert given_here[key] == value


# -- trusted the way ssh trusts its configuration -----------------------------------

GOOD_TEXT = "defaults:\n  role: felix\n"


def _fresh(tmp_path_factory: pytest.TempPathFactory, file_mode: int, dir_mode: int) -> Path:
    directory = tmp_path_factory.mktemp("etc") / "typhapki"
    directory.mkdir()
    path = directory / "typhapki.yaml"
    path.write_text(GOOD_TEXT)
    path.chmod(file_mode)
    directory.chmod(dir_mode)
    return path


@settings(max_examples=40, deadline=None)
@given(file_mode=st.integers(0o400, 0o777), dir_mode=st.integers(0o500, 0o777))
def test_a_file_or_directory_others_can_write_is_not_obeyed(
    tmp_path_factory: pytest.TempPathFactory, file_mode: int, dir_mode: int
) -> None:
    path = _fresh(tmp_path_factory, file_mode | 0o400, dir_mode | 0o500)
    writable = (file_mode | dir_mode) & 0o022
    if writable:
        with pytest.raises(ConfigError, match=r"writable by group or others.*not obeyed"):
            nodeconfig.load(path)
    else:
        assert nodeconfig.load(path).defaults == {"role": "felix"}


@pytest.mark.parametrize("which", ["file", "directory", "link target's directory"])
def test_a_file_owned_by_someone_else_is_not_obeyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """Root may obey only root's file; a user only root's or their own."""
    directory = tmp_path / "etc"
    directory.mkdir()
    path = directory / "typhapki.yaml"
    path.write_text(GOOD_TEXT)
    if which == "link target's directory":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "real.yaml").write_text(GOOD_TEXT)
        path.unlink()
        path.symlink_to(elsewhere / "real.yaml")
        foreign = elsewhere
    else:
        foreign = path if which == "file" else directory
    assert nodeconfig.load(path).defaults == {"role": "felix"}
    if os.geteuid() == 0:
        os.chown(foreign, 65534, -1)  # nobody
    else:  # the same file, read by a run as another (non-root) user
        monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)
    with pytest.raises(ConfigError, match=r"owned by uid \d+, not root or the user"):
        nodeconfig.load(path)


def test_a_refused_file_is_in_the_fact_and_one_line_elsewhere(tmp_path: Path) -> None:
    env = _config(tmp_path, GOOD_TEXT)
    Path(env["TYPHAPKI_CONFIG"]).chmod(0o666)
    result = run_cli("check", "--out", tmp_path / "out", env=env)
    assert_one_line_error(result, 2, env["TYPHAPKI_CONFIG"], "writable by group or others")
    facts = run_cli("facts", "--out", tmp_path / "out", env=env)
    assert facts.returncode == 0, facts.stderr
    fact = json.loads(facts.stdout)["typhapki"]
    assert fact["ok"] is False
    assert "writable by group or others" in fact["error"]


def _deep(depth: int) -> str:
    return "defaults:\n  out: " + "[" * depth + "]" * depth + "\n"


def _alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "defaults:\n  out: /x\nbomb:\n" + "".join(f"  {line}\n" for line in lines)


YAML_BOMBS: dict[str, tuple[Callable[[int], str], str]] = {
    "deep": (lambda n: _deep(65 + n * 997), "nested more than 64 levels deep"),
    "alias bomb": (lambda n: _alias_bomb(6 + n % 3), "more than 100000 values"),
    "many aliases": (
        lambda n: "x: &x a\ny: [" + ", ".join(["*x"] * (101 + n)) + "]\n",
        "more than 100 YAML aliases",
    ),
    "tag": (lambda n: f"defaults:\n  out: !!python/name:os.system{n}\n", "YAML tag"),
    "two documents": (lambda n: "defaults: {}\n---\ndefaults: {}\n", "more than one YAML"),
}


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(sorted(YAML_BOMBS)), size=st.integers(0, 100))
def test_the_file_gets_hieras_yaml_limits(
    tmp_path_factory: pytest.TempPathFactory, kind: str, size: int
) -> None:
    make, needle = YAML_BOMBS[kind]
    path = tmp_path_factory.mktemp("etc") / "typhapki.yaml"
    path.write_text(make(size))
    with pytest.raises(ConfigError, match=needle) as caught:
        nodeconfig.load(path)
    assert str(caught.value).startswith(str(path))


def test_a_deep_file_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    env = _config(tmp_path, _deep(100_000))
    result = run_cli("check", "--out", tmp_path / "out", env=env)
    assert_one_line_error(result, 2, env["TYPHAPKI_CONFIG"], "nested more than 64")


FLAG_ONLY = {  # option: a command that has it
    "force": "ca init",
    "allow_rollback": "rotate-ca",
    "cfssl_allow_http": "issue",
    "skip_mtls_proof": "ferm",
}


@settings(max_examples=30, deadline=None)
@given(
    option=st.sampled_from(sorted(FLAG_ONLY)),
    in_defaults=st.booleans(),
    dashes=st.booleans(),
    value=st.sampled_from(["true", "false", "yes", "~"]),
)
def test_options_that_skip_a_safety_check_are_flags_only(
    tmp_path_factory: pytest.TempPathFactory,
    option: str,
    in_defaults: bool,
    dashes: bool,
    value: str,
) -> None:
    key = option.replace("_", "-") if dashes else option
    place = "defaults:\n" if in_defaults else f"commands:\n  {FLAG_ONLY[option]}:\n  "
    path = tmp_path_factory.mktemp("etc") / "typhapki.yaml"
    path.write_text(f"{place}  {key}: {value}\n")
    config = nodeconfig.load(path)
    with pytest.raises(ConfigError, match=f"{key}: --{option.replace('_', '-')} .*flag only"):
        nodeconfig.default_map(config)


# Scalars as a node configuration holds them, and the text json writes for them.
_scalars = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
    st.sampled_from(["~", "null", "Null", "", "0640", "yes", "1e3", "-0", "a: b", "#x"]),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    doc=st.dictionaries(st.sampled_from(["version", "defaults", "commands", "x"]), _values),
    indent=st.sampled_from([None, 2]),
    ascii_only=st.booleans(),
    comments=st.lists(st.sampled_from(["# Managed by Puppet", "", "  # note"]), max_size=3),
)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_json_reads_as_the_yaml_reader_reads_it(
    doc: dict[str, object],
    indent: int | None,
    ascii_only: bool,
    comments: list[str],
    tmp_path: Path,
) -> None:
    """The module writes the file as JSON (YAML too); typhapki reads it with json, and
    must get what PyYAML's BaseLoader gets from the same text, or the same refusal."""
    text = "\n".join([*comments, json.dumps(doc, indent=indent, ensure_ascii=ascii_only)]) + "\n"
    path = tmp_path / "typhapki.yaml"

    def read(how: Callable[[str, Path], object]) -> object:
        try:
            return ("ok", how(text, path))
        except ConfigError as exc:
            return ("error", str(exc))

    by_json = read(nodeconfig._as_json)
    by_yaml = read(nodeconfig._as_yaml)
    if by_json == ("ok", nodeconfig._NOT_JSON):  # left to the YAML reader: raw non-ASCII
        assert not text.isascii() or "\\ud" in text.lower()
    else:
        assert by_json == by_yaml


# Characters YAML and Python's str methods disagree on: line breaks only str.splitlines()
# knows (\x0b, \x0c, \x1c-\x1e), breaks both know (\x85, \u2028, \u2029), whitespace
# only str.lstrip() strips (\x1f, \xa0, \u3000), and characters YAML refuses outright.
_ODD = "\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000\x00\x7f"
# What a comment line may hold: a document that must never be obeyed from there.
_HIDDEN = ['{"defaults": {"role": "typha"}}', '{"commands": {}}', '{"version": 2}']


@settings(max_examples=200, deadline=None)
@given(
    comments=st.lists(
        st.tuples(
            st.text(st.sampled_from(" \t\r" + _ODD), max_size=2),  # before the '#'
            st.text(st.sampled_from(" x" + _ODD), max_size=2),  # between '#' and the JSON
            st.sampled_from(["", *_HIDDEN]),
        ),
        min_size=1,
        max_size=3,
    ),
    shown=st.sampled_from(['{"defaults": {"role": "felix"}}', '{"version": 1}', "{}"]),
    newline=st.sampled_from(["\n", "\r\n", "\r", "\x85", "\u2028"]),
    where=st.integers(0, 3),
)
def test_the_json_reader_obeys_no_line_yaml_takes_as_a_comment(
    comments: list[tuple[str, str, str]], shown: str, newline: str, where: int
) -> None:
    """Comment lines, any of them holding JSON behind characters YAML and Python's str
    methods read differently, before or inside the document: whenever the fast reader
    takes the file, the YAML reader reads the same document (or refuses it the same
    way), so nothing the YAML reader takes as a comment is ever obeyed."""
    lines = [lead + "#" + gap + hidden for lead, gap, hidden in comments]
    opened, closed = shown[:1], shown[1:]
    at = min(where, len(lines))
    text = newline.join([*lines[:at], opened, *lines[at:], closed]) + newline
    path = Path("typhapki.yaml")

    def read(how: Callable[[str, Path], object]) -> object:
        try:
            return ("ok", how(text, path))
        except ConfigError as exc:
            return ("error", str(exc))

    by_json = read(nodeconfig._as_json)
    if by_json != ("ok", nodeconfig._NOT_JSON):
        assert by_json == read(nodeconfig._as_yaml), repr(text)


@pytest.mark.parametrize(
    "text",
    [
        '# note\x0c{"defaults": {"role": "typha"}}\n{}\n',  # a form feed inside a comment
        '# note\x1c{"defaults": {"role": "typha"}}\n{}\n',
        '\u3000# {"defaults": {"role": "typha"}}\n{}\n',  # not a comment for YAML
        '\x0c# note\n{"defaults": {"role": "felix"}}\n',  # YAML refuses the form feed
    ],
)
def test_what_yaml_refuses_or_reads_otherwise_is_left_to_it(text: str) -> None:
    assert nodeconfig._as_json(text, Path("typhapki.yaml")) is nodeconfig._NOT_JSON


def test_the_module_s_json_needs_no_yaml_parser(tmp_path: Path, ca_dir: Path) -> None:
    """`check` as Puppet runs it, with the file as the module writes it: PyYAML is not
    loaded (tests/cli/test_console.py checks the process's imports the same way)."""
    from tests.conftest import run_cli_process

    config = {"version": 1, "defaults": {"out": str(tmp_path / "out"), "ca_dir": str(ca_dir)}}
    env = _config(tmp_path, "# Managed by Puppet\n" + json.dumps(config, indent=2) + "\n")
    assert run_cli("issue", env=env).returncode == 0
    proc = run_cli_process("check", env={**env, "PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-500:]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "typhapki.cli.nodeconfig" in imported
    assert "yaml" not in imported


def test_a_deep_json_file_is_one_line(tmp_path: Path) -> None:
    deep = '{"defaults": ' + "[" * 70 + "]" * 70 + "}"
    with pytest.raises(ConfigError, match="nested more than 64 levels"):
        nodeconfig.load(Path(_config(tmp_path, deep)["TYPHAPKI_CONFIG"]))


NUMBER_OPTIONS = sorted(
    {(c.name, o.name) for c in options.COMMANDS for o in c.options if o.kind in (int, float)}
)
NUMBER_TEXT = st.one_of(
    st.from_regex(r"\A[0-9]{1,4}(\.[0-9]{1,3})?\Z"),
    st.sampled_from(["٣", "\uff13", "1_0", " 5", "+5", "-1", "1e3", "nan", "inf", "0x10",
                     "5.", ".5", "", "9" * 30, "²"]),
    st.text(alphabet="0123456789.-+_ e٣", max_size=6),
)  # fmt: skip


@settings(max_examples=50, deadline=None)
@given(option=st.sampled_from(NUMBER_OPTIONS), text=NUMBER_TEXT)
def test_a_number_is_read_alike_from_a_flag_and_from_the_file(
    option: tuple[str, str], text: str
) -> None:
    """One reader for a number option's text (typhapki/numbers.py `option_number`): the
    node configuration's, typer's (`checked`) and the fast path's agree on what they
    take and on its value. click's int() and float() took Unicode digits, `1_0`, signs,
    nan and inf, where the number parser refuses them."""
    from typhapki.cli.boundary import checked
    from typhapki.cli.fast_path import _plain
    from typhapki.numbers import option_number
    from typhapki.provenance import OptionError

    command, name = option
    spec = options.COMMAND[command]
    opt = spec.option(name)
    try:
        expected: object = option_number(opt.kind, text, name)
    except UsageError:
        expected = None
    path = Path("/etc/typhapki/typhapki.yaml")
    try:
        from_file: object = nodeconfig._converted(path, f"defaults.{name}", opt, text)
    except ConfigError as exc:
        assert str(exc).startswith(f"{name} {text!r} (from {path}: defaults.{name}): "), exc
        from_file = None
    assert (from_file is None) == (expected is None)
    try:
        typed = checked(spec, {name: text}, {name: opt.flag})[name]
    except OptionError as exc:
        assert exc.worded({name: opt.flag}).startswith(f"{name} {text!r} (from {opt.flag}): ")
        typed = None
    assert typed == expected
    try:
        fast: object = _plain(opt, text)
    except ValueError:
        fast = None  # typer decides: `checked` above
    assert fast == expected
