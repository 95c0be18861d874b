"""The man page and the bash completion, generated from the option table.

    python3 -m typhapki.cli.docgen man docs/typhapki.1                     # roff, typhapki(1)
    python3 -m typhapki.cli.docgen bash contrib/bash-completion/typhapki   # static completion
    python3 -m typhapki.cli.docgen options docs/options.md                 # the shared options

Every command, its help and its options are declared once, in
typhapki/options.py, which the CLI (typhapki/cli/typer_app.py) is built from too; the
Debian package installs the generated files (debian/typhapki.manpages,
debian/typhapki.bash-completion), and tests/cli/test_docgen.py fails when one of them and
the table disagree. The output is deterministic: no date, sorted commands. Neither
typer nor click is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from typhapki import __version__, errors, options
from typhapki.record import record


def _all_choices() -> tuple[dict[str, tuple[str, ...]], dict[tuple[str, str], tuple[str, ...]]]:
    """Option -> the values completion offers (as the first command in the table that
    has it declares them), and (command, option) -> values where a command differs."""
    common: dict[str, tuple[str, ...]] = {}
    narrowed: dict[tuple[str, str], tuple[str, ...]] = {}
    for command in options.COMMANDS:
        for opt in command.options:
            if opt.choices and not opt.argument:
                common.setdefault(opt.flag, opt.choices)
    for command in options.COMMANDS:
        for opt in command.options:
            if opt.flag in common and opt.choices != common[opt.flag]:
                narrowed[(command.name, opt.flag)] = opt.choices
    return common, narrowed


# Values a completion offers for options that take one of a fixed set of words, and
# where one command takes fewer of them: (command, option) -> values.
CHOICES, COMMAND_CHOICES = _all_choices()


def choices(command: str, option: str) -> tuple[str, ...] | None:
    """The values completion offers for `option` of `command` (None: not a fixed set)."""
    return COMMAND_CHOICES.get((command, option), CHOICES.get(option))


# The exit codes, each once, keyed by errors.py's constants: the man page's EXIT STATUS
# is made from it, and tests/cli/test_docgen.py holds errors.py, docs/exit-codes.md and
# README.md's command table to it.
EXIT_STATUS = (
    (errors.EXIT_OK, "Success: the work is done, or nothing needed doing."),
    (errors.EXIT_NEEDS_ACTION, "Action needed: e.g. `check` found a set that `issue` must renew."),
    (errors.EXIT_USAGE, "Usage or input error: a bad option, file or hiera value."),
    (
        errors.EXIT_REFUSED,
        "Refused: e.g. replacing a CA without --force, a skipped rotation stage.",
    ),
    (errors.EXIT_IO, "Filesystem error: a file could not be read or written."),
    (
        errors.EXIT_SIGNER,
        "The signer failed: e.g. cfssl down, slow or refusing (the live set untouched).",
    ),
    (
        errors.EXIT_DEFERRED,
        "restart-typha deferred: the PodDisruptionBudget refused the eviction (retried).",
    ),
    (
        errors.EXIT_KUBE_API,
        "restart-typha, fleet ready, fleet gate (the live switch's gates): the "
        "Kubernetes API unreachable, untrusted, refusing or broken.",
    ),
    (
        errors.EXIT_PUPPETDB,
        "fleet, fleet ready, fleet gate: PuppetDB unreachable, slow, refusing or broken.",
    ),
    (130, "Interrupted."),
)
# The codes only some commands exit with, and those commands (each a command of
# settings/options.py); every other code may come from any command.
EXIT_COMMANDS = {
    errors.EXIT_DEFERRED: ("restart-typha",),
    errors.EXIT_KUBE_API: ("restart-typha", "fleet ready", "fleet gate"),
    errors.EXIT_PUPPETDB: ("fleet", "fleet ready", "fleet gate"),
}


def exit_codes(command: str) -> tuple[int, ...]:
    """The codes `command` may exit with, as EXIT_STATUS and EXIT_COMMANDS declare."""
    return tuple(
        code
        for code, _ in EXIT_STATUS
        if code not in EXIT_COMMANDS or command in EXIT_COMMANDS[code]
    )


@record(frozen=True)
class Opt:
    """One option of a command, as the man page and completion show it."""

    names: tuple[str, ...]
    metavar: str  # "" for a flag
    help: str
    required: bool
    repeatable: bool
    path: bool  # the value is a file or directory


@record(frozen=True)
class Cmd:
    """One command of the table, with its options."""

    path: tuple[str, ...]  # ("ca", "init")
    help: str
    arguments: tuple[str, ...]  # metavars, e.g. "PATHS..."
    options: tuple[Opt, ...]


def _first_paragraph(text: str | None) -> str:
    return (text or "").strip().split("\n\n")[0].replace("\n", " ").strip()


def _shown(opt: options.Opt) -> Opt:
    return Opt(
        names=opt.decls,
        metavar="" if opt.kind is bool else opt.name.upper(),
        help=_first_paragraph(opt.help),
        required=opt.required,
        repeatable=opt.multiple,
        path=opt.kind is Path,
    )


def commands() -> list[Cmd]:
    """Every command of the table, in name order."""
    return [
        Cmd(
            tuple(command.name.split()),
            _first_paragraph(command.help),
            tuple(o.flag + ("..." if o.multiple else "") for o in command.options if o.argument),
            tuple(_shown(o) for o in command.options if not o.argument),
        )
        for command in sorted(options.COMMANDS, key=lambda c: c.name.split())
    ]


def _roff(text: str) -> str:
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def _roff_code(text: str) -> str:
    """`literal` spans of a help text in bold."""
    parts = text.split("`")
    return "".join(
        f"\\fB{_roff(part)}\\fR" if i % 2 else _roff(part) for i, part in enumerate(parts)
    )


def _synopsis(cmd: Cmd) -> str:
    words = [f"\\fBtyphapki {' '.join(cmd.path)}\\fR"]
    for opt in cmd.options:
        if opt.required:
            words.append(f"\\fB{_roff(opt.names[0])}\\fR \\fI{opt.metavar}\\fR")
    if any(not o.required for o in cmd.options):
        words.append("[\\fIOPTIONS\\fR]")
    words += [f"\\fI{_roff(a)}\\fR" for a in cmd.arguments]
    return " ".join(words)


def man_page() -> str:
    """typhapki(1) in roff."""
    cmds = commands()
    out = [
        f'.TH TYPHAPKI 1 "" "typhapki {_roff(__version__)}" "User Commands"',
        ".SH NAME",
        "typhapki \\- " + _roff(_first_paragraph(options.PROGRAM_HELP).rstrip(".")),
        ".SH SYNOPSIS",
        "\\fBtyphapki\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
        ".br",
        "\\fBtyphapki\\fR [\\fICOMMAND\\fR] \\fB\\-\\-help\\fR",
        ".br",
        "\\fBtyphapki \\-\\-version\\fR",
        ".SH DESCRIPTION",
        "typhapki creates the per-cluster CA and, on every node, the Typha server and",
        "Felix client certificates that Calico's Typha and Felix accept for mutual TLS;",
        "it checks and renews them, and renders the Typha ferm rule (or its nftables",
        "sets) from hiera only after a DNS gate in which every cluster node resolved.",
        "Puppet runs it from",
        "\\fBexec\\fR resources (see \\fBEXIT STATUS\\fR) and as a Facter fact.",
        ".PP",
        "Errors are one line on standard error, \\fBtyphapki: error: \\fR...,",
        "naming the file, key, host or URL concerned; never a traceback.",
        ".SH COMMANDS",
    ]
    for cmd in cmds:
        out += [".SS " + _synopsis(cmd), _roff_code(cmd.help) or "\\&"]
        for opt in cmd.options:
            names = ", ".join(f"\\fB{_roff(n)}\\fR" for n in opt.names)
            value = f" \\fI{opt.metavar}\\fR" if opt.metavar else ""
            repeatable = opt.repeatable and "repeat" not in opt.help.lower()
            notes = [w for w, on in (("required", opt.required), ("repeatable", repeatable)) if on]
            suffix = f" ({', '.join(notes)})" if notes else ""
            out += [".TP", names + value, (_roff_code(opt.help) or "\\&") + _roff(suffix)]
    out += [".SH EXIT STATUS"]
    for code, text in EXIT_STATUS:
        out += [".TP", f"\\fB{code}\\fR", _roff_code(text)]
    out += [
        ".SH ENVIRONMENT",
        ".TP",
        "\\fBTYPHAPKI_NAMESERVERS\\fR",
        "Resolvers of the DNS gate (IP[:PORT], comma separated) when no",
        "\\fB\\-\\-nameserver\\fR is given; else /etc/resolv.conf.",
        ".SH FILES",
        ".TP",
        "\\fI/usr/share/typhapki/ferm_templates/\\fR",
        "The jinja2 templates of the ferm rule (\\fBplain\\fR and \\fBfunction\\fR styles);",
        "\\fBferm \\-\\-templates\\fR \\fIDIR\\fR uses others.",
        ".SH SEE ALSO",
        "\\fBferm\\fR(1), \\fBnft\\fR(8), \\fBopenssl\\fR(1), \\fBfacter\\fR(8);",
        "the documentation in /usr/share/doc/typhapki/ (exit-codes.md: the",
        "exit codes of every command).",
        "",
    ]
    return "\n".join(out)


def bash_completion() -> str:
    """A static bash completion for typhapki (no Python started on TAB)."""
    cmds = commands()
    groups = sorted({c.path[0] for c in cmds if len(c.path) > 1})
    value_opts = sorted({n for c in cmds for o in c.options if o.metavar for n in o.names})
    dir_opts = [n for n in value_opts if n.endswith(("-dir", "--out", "--from"))]
    path_opts = {n for c in cmds for o in c.options if o.path for n in o.names}
    file_opts = [n for n in value_opts if n in path_opts and n not in CHOICES and n not in dir_opts]
    lines = [
        "# bash completion for typhapki(1), generated by typhapki.cli.docgen; do not edit.",
        "_typhapki()",
        "{",
        "    local cur prev words cword split",
        "    _init_completion -s || return",
        '    local i path="" skip=0',
        "    for ((i = 1; i < cword; i++)); do",
        "        if ((skip)); then skip=0; continue; fi",
        '        case "${words[i]}" in',
        f"            {' | '.join(value_opts) or '__none__'}) skip=1 ;;",
        "            -*) ;;",
        f'            *) if [[ -z $path || " {" ".join(groups)} " == *" $path "* ]]; then',
        '                   path="${path:+$path }${words[i]}"',
        "               fi ;;",
        "        esac",
        "    done",
    ]
    narrowed: dict[tuple[str, ...], list[str]] = {}
    for (command, name), values in sorted(COMMAND_CHOICES.items()):
        narrowed.setdefault(values, []).append(f'"{command} {name}"')
    if narrowed:
        lines.append('    case "$path $prev" in')
        for values, keys in narrowed.items():
            offer = f'COMPREPLY=($(compgen -W "{" ".join(values)}" -- "$cur"))'
            lines.append(f"        {' | '.join(keys)}) {offer}; return ;;")
        lines.append("    esac")
    lines.append('    case "$prev" in')
    for name, choices in sorted(CHOICES.items()):
        if name in value_opts:
            offer = f'COMPREPLY=($(compgen -W "{" ".join(choices)}" -- "$cur"))'
            lines.append(f"        {name}) {offer}; return ;;")
    if dir_opts:
        lines.append(f"        {' | '.join(dir_opts)}) _filedir -d; return ;;")
    if file_opts:
        lines.append(f"        {' | '.join(file_opts)}) _filedir; return ;;")
    free = [n for n in value_opts if n not in CHOICES and n not in dir_opts + file_opts]
    if free:  # a name, a number, a duration: nothing to offer
        lines.append(f"        {' | '.join(free)}) return ;;")
    lines += ["    esac", "    $split && return", '    case "$path" in']
    tops = sorted({c.path[0] for c in cmds})
    top_words = " ".join([*tops, "--help", "--version"])
    lines.append(f'        "") COMPREPLY=($(compgen -W "{top_words}" -- "$cur")) ;;')
    own = {c.path[0]: c for c in cmds if len(c.path) == 1 and c.path[0] in groups}
    for group in groups:
        subs = sorted(c.path[1] for c in cmds if c.path[0] == group and len(c.path) > 1)
        # A group that is a command too (`fleet`): its subcommands and its own options.
        flags = (
            sorted({n for o in own[group].options for n in o.names if n.startswith("--")})
            if group in own
            else []
        )
        words = " ".join([*subs, *flags, "--help"])
        lines.append(f'        {group}) COMPREPLY=($(compgen -W "{words}" -- "$cur")) ;;')
    for cmd in cmds:
        if cmd.path[0] in own and len(cmd.path) == 1:
            continue  # offered with its group's subcommands above
        names = sorted({n for o in cmd.options for n in o.names if n.startswith("--")})
        action = f'COMPREPLY=($(compgen -W "{" ".join([*names, "--help"])}" -- "$cur"))'
        if cmd.arguments:  # positional files (inspect, lint-hiera)
            action = f"if [[ $cur == -* ]]; then {action}; else _filedir; fi"
        lines.append(f'        "{" ".join(cmd.path)}") {action} ;;')
    lines += ["    esac", "} &&", "    complete -F _typhapki typhapki", ""]
    return "\n".join(lines)


OPTIONS_DOC_HEAD = """# Options shared by several commands

Generated from their one declaration (`typhapki/options.py`) by
`python3 -m typhapki.cli.docgen options docs/options.md`; `tests/cli/test_docgen.py` fails
when this file and the declaration disagree. Every other option belongs to one
command: `typhapki COMMAND --help`, or `man typhapki`.

A value may come from a flag, from the node configuration file
(`/etc/typhapki/typhapki.yaml`, under `defaults:` or `commands: COMMAND:`), or, for
the certificate and signer options marked below, from the cluster's `typha:` mapping
in hiera. Flags win over the file, the file over hiera. Secrets are files on the node,
never values in hiera; flag-only options are never read from the file.

"""


def options_doc() -> str:
    """docs/options.md: the shared options' table."""
    return OPTIONS_DOC_HEAD + options.markdown_table()


# --- the Puppet module's types of hiera values ------------------------------------------

PUPPET_HEAD = (
    "# Generated by `python3 -m typhapki.cli.docgen puppet puppet/typhapki` from the option\n"
    "# table (typhapki/options.py) and the hiera judge (typhapki/inventory/hiera.py):\n"
    "# do not edit; tests/cli/test_docgen.py fails when they disagree.\n"
)


def _enum(values: Sequence[str]) -> str:
    return "Enum[" + ", ".join(f"'{v}'" for v in values) + "]"


def _suites_pattern() -> str:
    """Calico's TLS_CIPHER_SUITES as the judge takes it: suite names, comma-separated,
    white space around each (`hiera.cipher_suites`)."""
    from typhapki.options import CIPHER_SUITES

    name = "(" + "|".join(CIPHER_SUITES) + ")"
    return rf"Pattern[/\A[[:space:]]*{name}[[:space:]]*(,[[:space:]]*{name}[[:space:]]*)*\z/]"


def _typha_key_type(key: str) -> str:
    """The Puppet type of one key of the cluster's ``typha:`` mapping: what the judge
    (typhapki/inventory/hiera.py `_typha_value`) accepts when hiera is read."""
    from typhapki.inventory import hiera
    from typhapki.inventory.hostnames import MIN_PREFIX_V4, MIN_PREFIX_V6

    opt = options.BY_NAME.get(key)
    named = {
        "tls_stage": "Typhapki::Typha::TlsStage",
        "tls_min_version": "Typhapki::Typha::TlsMinVersion",
        "tls_cipher_suites": "Typhapki::Typha::CipherSuites",
        "port": "Typhapki::Typha::Port",
        "signer": "Typhapki::Typha::Signer",
        "days": "Integer[1]",
        "trust": "Array[String]",
        "emergency": "Typhapki::Typha::Emergency",
        "mode": _enum(hiera._MODES),
        "style": _enum(hiera._STYLES),
        "dns_gate": _enum(hiera._DNS_GATES),
        "networks": "Array[String, 1]",
        "network_variable": "String",
        "prefix_v4": f"Integer[{MIN_PREFIX_V4}, 32]",
        "prefix_v6": f"Integer[{MIN_PREFIX_V6}, 128]",
        "ferm_output": "String[1]",
        "typha_address": "String[1]",
    }
    if key in named:
        return named[key]
    if key in hiera._CFSSL_NAMES:
        return "Typhapki::CfsslName"
    if opt is not None and opt.choices:
        return _enum(opt.choices)
    if key in ("key_owner", "key_group", "key_mode", "renew_before", "typha_lifetime",
               "felix_lifetime"):  # fmt: skip
        return "Variant[String, Integer]"  # a uid, a mode or seconds may be numbers
    if opt is not None and opt.kind is str:
        return "String"
    raise KeyError(f"{key}: no Puppet type (typhapki/cli/docgen.py _typha_key_type)")


def puppet_types() -> dict[str, str]:
    """The Puppet module's generated files, by path under puppet/typhapki: the types of
    the cluster's ``typha:`` values, the function that maps each key to its type (the
    module names the hiera key of a refused value), the mapping's Struct per live
    switch stage, and the cfssl auth keys each role needs."""
    from typhapki.inventory import hiera
    from typhapki.pki import emergency
    from typhapki.settings.wiring import MIN_VERSIONS, Stage
    from typhapki.typhaports import TLS_PORTS

    tls = TLS_PORTS.server
    versions = ", ".join(f"Float[{v}, {v}]" for v in MIN_VERSIONS)
    files = {
        "types/typha/tlsstage.pp": (
            "# @summary The live switch's stage of a cluster (`typha.tls_stage`), as the CLI's\n"
            "#   Stage (typhapki/settings/wiring.py).\n"
            f"type Typhapki::Typha::TlsStage = {_enum([s.value for s in Stage])}\n"
        ),
        "types/typha/tlsminversion.pp": (
            "# @summary Typha's and Felix's minimum TLS version (`typha.tls_min_version`);\n"
            "#   YAML reads an unquoted 1.3 as a number.\n"
            f"type Typhapki::Typha::TlsMinVersion = Variant[{_enum(MIN_VERSIONS)}, {versions}]\n"
        ),
        "types/typha/ciphersuitelist.pp": (
            "# @summary Go's secure TLS 1.2 ECDHE cipher suites, comma-separated (Calico's\n"
            "#   TLS_CIPHER_SUITES).\n"
            f"type Typhapki::Typha::CipherSuiteList = {_suites_pattern()}\n"
        ),
        "types/typha/ciphersuites.pp": (
            "# @summary Typha's and Felix's TLS 1.2 cipher suites (`typha.tls_cipher_suites`):\n"
            "#   comma-separated or as a list (an unknown one makes Typha panic at start).\n"
            "type Typhapki::Typha::CipherSuites = Variant[\n"
            "  Typhapki::Typha::CipherSuiteList,\n"
            "  Array[Typhapki::Typha::CipherSuiteList, 1],\n]\n"
        ),
        "types/typha/port.pp": (
            "# @summary The plain Typha's port (`typha.port`).\n"
            "type Typhapki::Typha::Port = Integer[1, 65535]\n"
        ),
        "types/typha/plainport.pp": (
            "# @summary The plain Typha's port while the TLS Typha listens beside it, on\n"
            f"#   {tls} (`tls_stage` {' or '.join(hiera.SIDE_BY_SIDE)}).\n"
            f"type Typhapki::Typha::PlainPort = Variant[Integer[1, {tls - 1}], "
            f"Integer[{tls + 1}, 65535]]\n"
        ),
        "types/typha/emergency.pp": (
            "# @summary The emergency CA roll of a cluster (`typha.emergency`,\n"
            "#   docs/rotation.md): its step, the new CA (PEM) and, in cfssl mode, the\n"
            "#   new intermediate's label.\n"
            "#   `contain` needs no new CA; every later step does.\n"
            "type Typhapki::Typha::Emergency = Variant[\n"
            "  Struct[{\n"
            f"    step                => {_enum(emergency.STEPS[:1])},\n"
            "    Optional[new_ca]    => Optional[String[1]],\n"
            "    Optional[new_label] => Optional[Typhapki::CfsslName],\n  }],\n"
            "  Struct[{\n"
            f"    step                => {_enum(emergency.STEPS[1:])},\n"
            "    new_ca              => String[1],\n"
            "    Optional[new_label] => Optional[Typhapki::CfsslName],\n  }],\n]\n"
        ),
        "types/typha/signer.pp": (
            "# @summary Who signs the cluster's certificates (`typha.signer`).\n"
            f"type Typhapki::Typha::Signer = {_enum(options.BY_NAME['signer'].choices)}\n"
        ),
    }
    keys = sorted(hiera.TYPHA_READERS)
    width = max(len(k) for k in keys) + 2
    lines = [f"    {repr(k).ljust(width)} => {_typha_key_type(k)}," for k in keys]
    files["functions/typha_types.pp"] = (
        "# @summary The type of each key of a cluster's `typha:` mapping, as the nodes and\n"
        "#   `typhapki lint-hiera` judge it: typhapki names the hiera key of a value its\n"
        "#   type refuses.\n"
        "function typhapki::typha_types() >> Hash[String[1], Type] {\n  {\n"
        + "\n".join(lines)
        + "\n  }\n}\n"
    )
    side = _enum(hiera.SIDE_BY_SIDE)
    others = _enum([s.value for s in Stage if s.value not in hiera.SIDE_BY_SIDE])

    def struct(stage: str, port: str) -> str:
        fields = [f"    {stage},", f"    Optional[port] => Optional[{port}],"]
        fields += [
            f"    Optional[{k}] => Optional[{_typha_key_type(k)}],"
            for k in keys
            if k not in ("tls_stage", "port")
        ]
        return "  Struct[{\n" + "\n".join(fields) + "\n  }],"

    files["types/typha.pp"] = (
        "# @summary A cluster's `typha:` mapping (defaults merged), one Struct per live switch\n"
        "#   stage: while the TLS Typha listens beside the plain one, the plain port is not\n"
        "#   its port.\n"
        "type Typhapki::Typha = Variant[\n"
        + struct(f"tls_stage => {side}", "Typhapki::Typha::PlainPort")
        + "\n"
        + struct(f"Optional[tls_stage] => Optional[{others}]", "Typhapki::Typha::Port")
        + "\n]\n"
    )
    roles = [r for r in options.ROLE.choices if r != "both"]
    auth = [o.name for o in options.group("signer") if o.name.startswith("cfssl_auth_key")]
    common = "cfssl_auth_key"
    assert common in auth and all(f"{common}_{r}" in auth for r in roles)

    def keyed(role: Sequence[str], given: Sequence[str]) -> str:
        fields = [f"    role => {_enum(role)},"]
        fields += [
            f"    {k} => Boolean[true]," if k in given else f"    Optional[{k}] => Boolean[true],"
            for k in auth
        ]
        return "  Struct[{\n" + "\n".join(fields) + "\n  }],"

    variants = [keyed(options.ROLE.choices, [common])]
    variants += [keyed([r], [f"{common}_{r}"]) for r in roles]
    variants.append(keyed(["both"], [f"{common}_{r}" for r in roles]))
    files["types/certs/cfsslauth.pp"] = (
        "# @summary The cfssl auth keys of a node's roles: one for both profiles, or one per\n"
        "#   role it holds. Without one, a node would ask cfssl's unauthenticated /sign,\n"
        "#   which multirootca does not serve. `true` where the Sensitive key is given.\n"
        "type Typhapki::Certs::CfsslAuth = Variant[\n" + "\n".join(variants) + "\n]\n"
    )
    return {path: PUPPET_HEAD + text for path, text in files.items()}


def main(argv: list[str]) -> int:
    kinds = {"man": man_page, "bash": bash_completion, "options": options_doc}
    if len(argv) == 2 and argv[0] == "puppet":
        for path, text in puppet_types().items():
            target = Path(argv[1]) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        return 0
    if len(argv) != 2 or argv[0] not in kinds:
        print("usage: python3 -m typhapki.cli.docgen man|bash|options|puppet FILE", file=sys.stderr)
        return 2
    Path(argv[1]).write_text(kinds[argv[0]](), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
