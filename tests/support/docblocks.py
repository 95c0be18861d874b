"""The command blocks of README.md and docs/**/*.md, and what can be checked without running them.

Used by tests/test_docs.py. A block is a fenced code block; its language decides how
it is tested (```sh runs, ```puppet compiles, ```yaml and ```json parse). The line
`<!-- docs-test: not-run: REASON -->` right before a fence (blank lines allowed between)
marks a block that cannot run as it stands (it needs a live cluster, a node's real
paths, minutes of benchmarks): it is then checked statically (`bash -n`, every
`typhapki SUBCOMMAND --option` exists, every repository path it names exists). The line
`<!-- docs-test: against: SERVER -->` marks a block that needs a server the test suite
runs (puppetdb, kubeapi, cfssl, ...): tests/test_docs.py runs it against that server.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer.main

ROOT = Path(__file__).resolve().parent.parent.parent

SHELL_LANGS = frozenset({"sh", "bash", "shell"})
TESTED_LANGS = SHELL_LANGS | {"puppet", "yaml", "json"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(
    r"^\s*<!--\s*docs-test:\s*(?P<what>[a-z-]+)\s*(?::\s*(?P<reason>.*?))?\s*-->\s*$"
)
# Links in Markdown: [text](target "title") and <target> forms are enough for these docs.
_LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, text, and its docs-test marker."""

    doc: Path  # relative to ROOT
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None  # the reason, when marked not-run
    against: str | None = None  # the server, when marked `against: SERVER`

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}:{self.lang or 'text'}"


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/, relative to ROOT, in order."""
    docs = sorted(p.relative_to(ROOT) for p in (ROOT / "docs").rglob("*.md"))
    return [Path("README.md"), *docs]


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of one document, in order."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        lang = info.split()[0].lower() if info else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = _FENCE.match(lines[j])
            if (
                close
                and close["fence"].startswith(fence[0] * len(fence))
                and not close["info"].strip()
            ):
                break
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        if j == len(lines):
            raise ValueError(f"{doc}:{i + 1}: fenced block never closed")
        what, value = _marker_before(lines, i, doc)
        found.append(
            Block(
                doc,
                i + 1,
                lang,
                "\n".join(body) + "\n",
                value if what == "not-run" else None,
                value if what == "against" else None,
            )
        )
        i = j + 1
    return found


def _marker_before(lines: list[str], fence_index: int, doc: Path) -> tuple[str, str | None]:
    """("not-run", REASON), ("against", SERVER), or ("", None) for an unmarked block."""
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    if k < 0:
        return "", None
    m = _MARKER.match(lines[k])
    if not m:
        if "docs-test" in lines[k]:
            raise ValueError(f"{doc}:{k + 1}: malformed docs-test marker: {lines[k].strip()}")
        return "", None
    if m["what"] == "against" and m["reason"] and re.fullmatch(r"[a-z][a-z-]*", m["reason"]):
        return "against", m["reason"]
    if m["what"] != "not-run" or not m["reason"]:
        raise ValueError(
            f"{doc}:{k + 1}: unknown docs-test marker (use `docs-test: not-run: REASON` "
            "or `docs-test: against: SERVER`)"
        )
    return "not-run", m["reason"]


def all_blocks() -> Iterator[Block]:
    for doc in documents():
        yield from blocks(doc)


def links(doc: Path) -> Iterator[tuple[int, str]]:
    """(line, target) of every Markdown link outside code blocks."""
    in_code = False
    fence = ""
    for number, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1):
        m = _FENCE.match(line)
        if m and (not in_code or (m["fence"].startswith(fence) and not m["info"].strip())):
            in_code, fence = (not in_code), m["fence"]
            continue
        if in_code:
            continue
        for link in _LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            yield number, link["target"]


# --- what a shell text invokes ----------------------------------------------------------

_SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "(", ")", "{", "}", "$(", "`"})


def shell_words(text: str) -> list[list[str]]:
    """Simple commands of a shell text, as word lists (continuations joined, comments gone).

    A lexer, not a shell: enough to find `typhapki ...` and `kubectl ...` invocations in
    documentation, including inside `$( )` and after `xargs`.
    """
    joined = re.sub(r"\\\n", " ", text)
    commands: list[list[str]] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        try:
            tokens = list(lexer)
        except ValueError:  # an unbalanced quote: bash -n reports it better
            tokens = line.split()
        for token in tokens:
            if token in _SEPARATORS or set(token) <= set(";&|()"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(token.removeprefix("$("))
        if current:
            commands.append(current)
    return commands


_WRAPPERS = frozenset({"sudo", "exec", "env", "time", "nice", "xargs", "command"})


def typhapki_invocations(text: str) -> list[list[str]]:
    """The argument lists (after the program name) of every `typhapki` call in a text."""
    calls: list[list[str]] = []
    # A synopsis's `[--mode strict|relaxed]`: the alternatives are words, not pipes.
    text = re.sub(r"\[([^\]\n]*)\]", lambda m: " " + m.group(1).replace("|", " ") + " ", text)
    for words in shell_words(text):
        # The program: the first word after VAR=value assignments and wrappers.
        i = 0
        while i < len(words) and (
            re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i])
            or words[i] in _WRAPPERS
            or (i and words[i].startswith("-") and words[i - 1] in _WRAPPERS)
        ):
            i += 1
        if i < len(words) and (words[i] == "typhapki" or words[i].endswith("/typhapki")):
            calls.append(words[i + 1 :])
            continue
        if "typhapki" in words:  # `xargs -r typhapki ...`, `timeout 5 typhapki ...`
            calls.append(words[words.index("typhapki") + 1 :])
    return calls


def _cli() -> Any:
    """The click command tree typer builds (typer >= 0.22 vendors click: duck-typed)."""
    from typhapki.cli.typer_app import app

    return typer.main.get_command(app)


def check_typhapki_call(args: list[str]) -> list[str]:
    """Problems with one `typhapki ARGS` call: unknown subcommand or option."""
    command = _cli()
    path = ["typhapki"]
    rest = list(args)
    while getattr(command, "commands", None) is not None:
        if rest and rest[0].startswith("-") and getattr(command, "invoke_without_command", False):
            break  # a group that is a command itself (`typhapki fleet --puppetdb URL`)
        if not rest or rest[0].startswith("-"):
            return (
                []
                if not rest or rest[0] in ("--help", "--version")
                else [f"`{' '.join(path)}` needs a subcommand, got {rest[0]!r}"]
            )
        name = rest.pop(0)
        if _is_placeholder(name):
            return []
        sub = command.commands.get(name)
        if sub is None:
            return [f"`{' '.join(path)}` has no subcommand {name!r}"]
        path.append(name)
        command = sub
    known: set[str] = {"--help"}
    for param in command.params:
        known.update(getattr(param, "opts", []))
        known.update(getattr(param, "secondary_opts", []))
    problems = []
    for word in rest:
        if word == "--":
            break
        if word.startswith("-") and len(word) > 1 and not _is_placeholder(word):
            option = word.split("=", 1)[0]
            if option not in known:
                problems.append(f"`{' '.join(path)}` has no option {option}")
    return problems


def _is_placeholder(word: str) -> bool:
    # `typhapki SUBCOMMAND --option` in prose-like blocks, `${cmd}`, `...`
    return word in ("...", "SUBCOMMAND", "COMMAND") or "$" in word or word.isupper()


_REPO_PATH = re.compile(
    r"^(?:\./)?(?P<path>(?:scripts|docs|bench|tests|hiera_sample|ferm_templates|typhapki|"
    r"contrib|puppet|debian|\.ci)/[A-Za-z0-9_./-]*)$"
)


def repo_paths(text: str) -> list[str]:
    """Repository-relative paths a shell text names (scripts/..., docs/..., ...)."""
    found = []
    for words in shell_words(text):
        for word in words:
            candidate = word.split("=", 1)[-1].rstrip(".,:;")
            m = _REPO_PATH.match(candidate)
            if m and "*" not in candidate:
                found.append(m["path"])
    return found
