"""typhapki's YAML limits are its own, whatever limits the PyYAML release brings."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typhapki import yamllimits
from typhapki.errors import ConfigError
from typhapki.yamllimits import MAX_ALIASES, MAX_DEPTH, scan_events

FILE = Path("/etc/typhapki/typhapki.yaml")
LOADERS = [yaml.SafeLoader] + ([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])


def _flow(depth: int) -> str:
    return "a: " + "[" * depth + "]" * depth + "\n"


def _block(depth: int) -> str:
    return "".join(" " * i + "- \n" if i == depth - 1 else " " * i + "k:\n" for i in range(depth))


def _mixed(depth: int) -> str:
    """Block mappings holding flow lists: `depth` + 1 levels."""
    half = max(1, depth // 2)
    block = "".join(" " * i + "k:\n" for i in range(half - 1))
    flow = depth - half + 1
    return block + " " * (half - 1) + "k: " + "[" * flow + "]" * flow + "\n"


SHAPES = {"flow": _flow, "block": _block, "mixed": _mixed}


class OwnLimitLoader(yaml.SafeLoader):
    """A libyaml with a nesting limit of its own below typhapki's input sizes, as PyYAML
    6.0.3 and later bundle: it refuses while its scanner runs ahead of the events."""

    LIMIT = 20

    def fetch_more_tokens(self) -> None:
        super().fetch_more_tokens()
        if self.flow_level > self.LIMIT or len(self.indents) > self.LIMIT:
            raise yaml.scanner.ScannerError(
                None, None, "exceeded maximum nesting depth", self.get_mark()
            )


# The same loader for every example of a test: patched once per test, never reset between.
@pytest.fixture(params=[*LOADERS, OwnLimitLoader], ids=lambda c: c.__name__)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(yamllimits, "yaml_loader", lambda: request.param)
    return request.param


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(shape=st.sampled_from(sorted(SHAPES)), depth=st.integers(MAX_DEPTH + 1, 5000))
def test_too_deep_is_refused_in_typhapkis_words(loader: Any, shape: str, depth: int) -> None:
    with pytest.raises(ConfigError) as caught:
        scan_events(SHAPES[shape](depth), FILE, "the node configuration file")
    message = str(caught.value)
    assert message.startswith(f"{FILE}:")
    assert f"nested more than {MAX_DEPTH} levels deep" in message
    assert "\n" not in message


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(shape=st.sampled_from(sorted(SHAPES)), depth=st.integers(2, MAX_DEPTH - 1))
def test_within_the_limit_passes_where_the_library_reads_it(
    loader: Any, shape: str, depth: int
) -> None:
    text = SHAPES[shape](depth)
    if loader is OwnLimitLoader and depth > OwnLimitLoader.LIMIT - 3:
        # Near or past the library's own (stricter) limit, its refusal stands: a YAML
        # error, never one of typhapki's limits.
        with contextlib.suppress(yaml.YAMLError):
            scan_events(text, FILE, "x")
        return
    scan_events(text, FILE, "x")


def test_a_plain_syntax_error_is_the_librarys_not_a_limit(loader: Any) -> None:
    with pytest.raises(yaml.YAMLError):
        scan_events("a: [b\nc: d: e\n", FILE, "x")


def test_too_many_aliases_in_typhapkis_words(loader: Any) -> None:
    text = "x: &x a\ny: [" + ", ".join(["*x"] * (MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(ConfigError, match=f"more than {MAX_ALIASES} YAML aliases"):
        scan_events(text, FILE, "x")


def _alias_bomb(_: int) -> str:
    rows = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    rows += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 6)]
    return "defaults: {}\nbomb:\n" + "".join(f"  {row}\n" for row in rows)


# A breach of each documented limit (docs/security.md), and the words that name the limit.
BREACHES: dict[str, tuple[Any, str]] = {
    "depth": (
        lambda size: "defaults:\n  out: " + _flow(MAX_DEPTH + 1 + size)[3:],
        "nested more than 64",
    ),
    "aliases": (
        lambda size: "x: &x a\ny: [" + ", ".join(["*x"] * (MAX_ALIASES + 1 + size)) + "]\n",
        f"more than {MAX_ALIASES} YAML aliases",
    ),
    "values": (_alias_bomb, f"more than {yamllimits.MAX_NODES} values"),
}  # fmt: skip
SURFACES = {  # the file's size limit, and the command that reads it
    "node configuration": 1024 * 1024,
    "hiera": 16 * 1024 * 1024,
}


@settings(max_examples=12, deadline=None)
@given(
    surface=st.sampled_from(sorted(SURFACES)),
    breach=st.sampled_from([*sorted(BREACHES), "size"]),
    size=st.integers(0, 3000),
)
def test_each_limit_is_one_line_naming_file_and_limit(
    tmp_path_factory: pytest.TempPathFactory, surface: str, breach: str, size: int
) -> None:
    from tests.conftest import assert_one_line_error, run_cli

    tmp = tmp_path_factory.mktemp("limits")
    limit = SURFACES[surface]
    if breach == "size":
        text, needle = "# x\n" * (limit // 4 + 1 + size), f"larger than {limit} bytes"
    else:
        make, needle = BREACHES[breach]
        text = make(size)
    if surface == "hiera":
        path = tmp / "lab.yaml"
        path.write_text(text)
        result = run_cli("check", "--out", tmp / "out", "--hiera", path, "--cluster", "lab")
    else:
        path = tmp / "typhapki.yaml"
        path.write_text(text)
        result = run_cli("check", "--out", tmp / "out", env={"TYPHAPKI_CONFIG": str(path)})
    assert_one_line_error(result, 2, str(path), needle)
