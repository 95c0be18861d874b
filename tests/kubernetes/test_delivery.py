"""The ways `manifests` delivers (typhapki/kubernetes/delivery.py): one request judged
once picks one way, by the flags given, or is refused in one line before anything is
read; every way the table names is reached. What each way prints and writes is proved
through the command (tests/commands/test_manifests.py, tests/kubernetes/test_kustomize.py,
tests/kubernetes/test_postrender.py, tests/kubernetes/test_stages.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from typhapki.errors import UsageError
from typhapki.kubernetes.delivery import RENDERING, WAYS, ManifestsRequest, _judge

MODES = ("--wiring", "--wiring-dir", "--kustomize-dir", "--post-render")


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("delivery")


# Every combination: the space is small enough to walk whole (256 requests, under 1 s).
COMBINATIONS = list(
    itertools.product(
        [set(c) for n in range(len(MODES) + 1) for c in itertools.combinations(MODES, n)],
        ["hardway", "operator"],
        [None, "all-at-once", "parallel", "switch"],
        [False, True],
    )
)


def test_one_way_by_the_flags_or_one_line(directory: Path) -> None:
    ways: set[str] = set()
    for modes, fmt, stage, deployment in COMBINATIONS:
        request = ManifestsRequest(
            directory / "pki", fmt, None, None, "--wiring" in modes,
            wiring_dir=directory if "--wiring-dir" in modes else None,
            kustomize_dir=directory if "--kustomize-dir" in modes else None,
            kustomize_base="base" if "--kustomize-dir" in modes else None,
            post_render="--post-render" in modes, tls_stage=stage,
            typha_deployment=directory / "typha.yaml" if deployment else None,
        )  # fmt: skip
        try:
            judged = _judge(request)
        except UsageError as exc:
            assert str(exc) and "\n" not in str(exc)
            if len(modes) > 1 and modes != {"--wiring", "--wiring-dir"}:
                assert "choose one way" in str(exc)
            continue
        assert len(modes) <= 1 or modes == {"--wiring", "--wiring-dir"}
        by_flag = {"--post-render": "post-render", "--kustomize-dir": "kustomize",
                   "--wiring-dir": "wiring-dir", "--wiring": "wiring"}  # fmt: skip
        expected = next((by_flag[m] for m in MODES[::-1] if m in modes), "objects")
        assert judged.way == expected, (modes, fmt, stage, deployment)
        live = stage in ("parallel", "switch")
        assert judged.stage == (judged.settings.stage if live else None)
        if judged.way in RENDERING:
            assert judged.settings.stage is not None  # a declared one, all-at-once too
        ways.add(judged.way)
    assert ways == {"objects", *WAYS}


def test_every_way_is_reached(directory: Path) -> None:
    """The table of ways and the flags agree: each flag picks its own way."""
    ask = ManifestsRequest
    requests = [
        ask(directory, "hardway", None, None, False),
        ask(directory, "hardway", None, None, True),
        ask(directory, "hardway", None, None, False, wiring_dir=directory),
        ask(directory, "hardway", None, None, False, kustomize_dir=directory,
            kustomize_base="base", tls_stage="parallel"),
        ask(directory, "hardway", None, None, False, post_render=True, tls_stage="all-at-once"),
    ]  # fmt: skip
    assert [_judge(r).way for r in requests] == ["objects", "wiring", "wiring-dir",
                                                 "kustomize", "post-render"]  # fmt: skip
    assert set(WAYS) == {"wiring", "wiring-dir", "kustomize", "post-render"}
