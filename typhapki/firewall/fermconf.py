"""Does ferm load this file? The `@include`s of a ferm.conf, followed as ferm follows them.

A rule written where ferm.conf does not include it is never loaded, and nothing says
so: Debian's ferm.conf includes `ferm.d/`, while many fleets' ferm modules write
`conf.d/`. `typhapki ferm` refuses such an output before it writes anything.

The rules are ferm's own (`collect_filenames` in /usr/sbin/ferm, 2.5): a name is
relative to the directory of the file that includes it; a name ending in `/` includes
the regular files of that directory, sorted, except hidden ones, backups (`~`) and
dpkg's leftovers; included files are read for their own includes. What this reader
cannot follow (a variable, a function, a pipe) makes the answer unknown, and nothing
is refused on an unknown.
"""

from __future__ import annotations

import re
from pathlib import Path

from typhapki.errors import ConfigError, TyphapkiError
from typhapki.safeio import read_regular

MAX_FILES = 64  # files read while following includes
MAX_BYTES = 1 << 20  # per file
_SKIPPED = re.compile(r"^\.|~$|\.dpkg-(old|dist|new|tmp)$")
_INCLUDE = re.compile(r"@include\b\s*(\((?P<list>[^)]*)\)|(?P<one>'[^']*'|\"[^\"]*\"|[^\s;]+))")
_WORD = re.compile(r"'([^']*)'|\"([^\"]*)\"|([^\s'\"]+)")


def _strip_comments(text: str) -> str:
    """ferm's comments: `#` to the end of the line, outside quotes."""
    out = []
    for line in text.splitlines():
        quote = ""
        for i, char in enumerate(line):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#":
                line = line[:i]
                break
        out.append(line)
    return "\n".join(out)


def _names(text: str) -> list[str] | None:
    """The names `@include` takes in `text`; None when one cannot be followed."""
    found = []
    for match in _INCLUDE.finditer(_strip_comments(text)):
        words = match.group("list") if match.group("list") is not None else match.group("one")
        for word in _WORD.finditer(words):
            name = next(g for g in word.groups() if g is not None)
            if any(c in name for c in "$&@|`") or not name:
                return None
            found.append(name)
    return found


def loads(conf: Path, target: Path) -> bool | None:
    """True when ferm, started on `conf`, reads `target`; False when it does not;
    None when the includes cannot be followed (or `conf` cannot be read)."""
    target = Path(target).absolute()
    seen: set[Path] = set()
    queue = [Path(conf).absolute()]
    while queue:
        script = queue.pop(0)
        if script in seen:
            continue
        seen.add(script)
        if script == target:
            return True
        if len(seen) > MAX_FILES:
            return None
        try:
            data = read_regular(script, "ferm include", MAX_BYTES)
        except (OSError, TyphapkiError):
            return None
        names = _names(data.decode("utf-8", "replace"))
        if names is None:
            return None
        for name in names:
            path = Path(name) if name.startswith("/") else script.parent / name
            if name.endswith("/"):
                if target.parent == path and not _SKIPPED.search(target.name):
                    return True
                try:
                    entries = sorted(path.iterdir())
                except OSError:
                    continue
                queue += [e for e in entries if not _SKIPPED.search(e.name) and e.is_file()]
            else:
                queue.append(path)
    return False


def included_dirs(conf: Path) -> list[str]:
    """The directories `conf` itself includes, as ferm resolves them: for the error."""
    try:
        data = read_regular(Path(conf), "ferm.conf", MAX_BYTES)
    except (OSError, TyphapkiError):
        return []
    names = _names(data.decode("utf-8", "replace")) or []
    return [
        str(Path(n) if n.startswith("/") else Path(conf).absolute().parent / n) + "/"
        for n in names
        if n.endswith("/")
    ]


DEFAULT_CONF = Path("/etc/ferm/ferm.conf")  # Debian's, which the ferm service runs


def check_loaded(output: Path, conf: Path | None) -> None:
    """Refuse, before anything is written, an `output` inside the directory of `conf`
    that `conf` does not load: ferm would never read the rule. Outputs elsewhere, a
    missing `conf` and includes this reader cannot follow are left alone."""
    conf = (conf or DEFAULT_CONF).absolute()
    output = Path(output).absolute()
    if conf.parent not in output.parents or not conf.is_file():
        return
    if loads(conf, output) is False:
        dirs = ", ".join(included_dirs(conf)) or "no directory"
        raise ConfigError(
            f"--output {output}: {conf} does not include {output.parent}/ (it includes "
            f"{dirs}), so ferm would never load the rule; write into an included "
            f"directory (--output, typhapki::ferm::output) or include it from {conf} "
            "(--ferm-conf names another ferm.conf)"
        )
