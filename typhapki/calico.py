"""The Calico releases typhapki meets, 3.28 to 3.33: what changes per release.

Pure data, in one place. `SHAPES` is the only knowledge of what Typha's and Felix's
processes look like (typhapki/monitoring/processes.py finds them through it, and so
do the fact, the metrics, `check --nagios`, restart drift and the fleet view).
`RELEASES` is the version table of docs/interop.md ("Calico releases"), which
tests/test_calico.py compares with the page; the tests of each row's subject are
parametrised over it (tests/monitoring/test_processes.py, tests/puppet/
test_facts_shapes.py, tests/kubernetes/test_image_shapes.py, tests/monitoring/
test_probe_releases.py).
"""

from __future__ import annotations

from enum import StrEnum

from typhapki.record import record


class Component(StrEnum):
    """A Calico process that reads the set."""

    TYPHA = "typha"
    FELIX = "felix"


@record(frozen=True)
class ProcessShape:
    """How one component's process looks in one range of releases.

    `name` is the process's comm or its argv[0]'s base name (any binary path);
    `args` the arguments that must follow argv[0] exactly, in order; `flag` an
    argument that must be among argv[1:]. `stand_in`: a process of that name stands
    for the component while none of the exact shape runs (calico-node's other
    processes, up to 3.32: they share Felix's pod and files).
    """

    component: Component
    name: str
    args: tuple[str, ...] = ()
    flag: str | None = None
    stand_in: bool = False

    def matches(self, name: str, argv: tuple[str, ...]) -> bool:
        """Whether a process called `name` with `argv` has exactly this shape."""
        if name != self.name:
            return False
        if self.args and argv[1 : 1 + len(self.args)] != self.args:
            return False
        return self.flag is None or self.flag in argv[1:]

    @property
    def argv(self) -> tuple[str, ...]:
        """The shortest command line of this shape."""
        return (self.name, *self.args, *((self.flag,) if self.flag else ()))


# Up to 3.32 Typha is its own binary and Felix is `calico-node -felix` (runit's
# felix/run); from 3.33 one `calico` binary runs every component
# (node/filesystem/etc/service/available/felix/run: `exec calico component felix`).
# `calico component cni ...`, `calico component node init` and kube-controllers match
# none of these: they are never taken for Typha or Felix.
SPLIT_TYPHA = ProcessShape(Component.TYPHA, "calico-typha")
SPLIT_FELIX = ProcessShape(Component.FELIX, "calico-node", flag="-felix", stand_in=True)
ONE_BINARY_TYPHA = ProcessShape(Component.TYPHA, "calico", args=("component", "typha"))
ONE_BINARY_FELIX = ProcessShape(Component.FELIX, "calico", args=("component", "felix"))
SHAPES: tuple[ProcessShape, ...] = (SPLIT_TYPHA, SPLIT_FELIX, ONE_BINARY_TYPHA, ONE_BINARY_FELIX)
PROCESS_NAMES: frozenset[str] = frozenset(s.name for s in SHAPES)


def shape_of(name: str, argv: tuple[str, ...]) -> ProcessShape | None:
    """The exact shape a process has, if any."""
    return next((s for s in SHAPES if s.matches(name, argv)), None)


@record(frozen=True)
class Release:
    """One Calico minor release, as far as Typha's mTLS is concerned."""

    version: str  # "3.30"
    typha_image: str  # calico/typha, or calico/calico from 3.33
    typha_args: tuple[str, ...]  # the Typha container's args: () or ("component", "typha")
    typha: ProcessShape
    felix: ProcessShape
    endpoint_slices: bool  # Felix finds Typha through EndpointSlices (3.31, PR #10715)
    reconnects: bool  # Felix reconnects in-process (3.31, PR #10306); before, it exits
    cipher_suites: bool  # TLS_CIPHER_SUITES is read (3.31)
    min_version: bool  # TLS_MIN_VERSION is read (3.32)

    @property
    def one_binary(self) -> bool:
        return self.typha is ONE_BINARY_TYPHA


def _release(minor: int) -> Release:
    one = minor >= 33
    return Release(
        version=f"3.{minor}",
        typha_image="calico/calico" if one else "calico/typha",
        typha_args=("component", "typha") if one else (),
        typha=ONE_BINARY_TYPHA if one else SPLIT_TYPHA,
        felix=ONE_BINARY_FELIX if one else SPLIT_FELIX,
        endpoint_slices=minor >= 31,
        reconnects=minor >= 31,
        cipher_suites=minor >= 31,
        min_version=minor >= 32,
    )


RELEASES: tuple[Release, ...] = tuple(_release(minor) for minor in range(28, 34))
BY_VERSION = {r.version: r for r in RELEASES}


def release_table() -> str:
    """docs/interop.md's version table, as Markdown: one row per release."""
    head = (
        "| Calico | Typha image (args) | Typha process | Felix process | Felix finds Typha "
        "| Felix loses Typha | `TLS_CIPHER_SUITES` | `TLS_MIN_VERSION` |"
    )
    rows = [head, "|" + "---|" * 8]
    for r in RELEASES:
        image = f"`{r.typha_image}`" + (f" (`{' '.join(r.typha_args)}`)" if r.typha_args else "")
        rows.append(
            f"| {r.version} | {image} | `{' '.join(r.typha.argv)}` | `{' '.join(r.felix.argv)}` "
            f"| {'EndpointSlices' if r.endpoint_slices else 'Endpoints'} "
            f"| {'reconnects in-process' if r.reconnects else 'exits, runit restarts it'} "
            f"| {'read' if r.cipher_suites else 'ignored'} "
            f"| {'read' if r.min_version else 'ignored'} |"
        )
    return "\n".join(rows) + "\n"
