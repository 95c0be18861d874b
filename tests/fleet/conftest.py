"""The PuppetDB stand-in (tests/support/puppetdb.py), started once per session; each
test gets it empty."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.puppetdb import StandIn, running_standin


@pytest.fixture(scope="session")
def _standin_server() -> Iterator[StandIn]:
    with running_standin() as standin:
        yield standin


@pytest.fixture
def standin(_standin_server: StandIn) -> StandIn:
    _standin_server.reset()
    return _standin_server
