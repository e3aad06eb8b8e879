"""Unit-tier fixtures (the shared ones are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from pyinfra.api.config import Config
from pyinfra.api.connect import connect_all
from pyinfra.api.inventory import Inventory
from pyinfra.api.state import State
from pyinfra.context import ctx_host, ctx_state
from site_memo import load_yaml_memoised

# Speed is measured in benchmarks, never asserted in tests: on a shared, loaded machine
# Hypothesis' own timing checks (a deadline per example, "input generation is slow") failed
# property tests whose properties held. Tests with settings of their own keep them.
settings.register_profile("shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared-machine")

#: the process-wide parse memo's patch (pytest_configure), undone by pytest_unconfigure
_MEMO_PATCH = pytest.MonkeyPatch()


def pytest_configure(config: pytest.Config) -> None:
    """Every site load in this process parses each distinct file content once (site_memo.py):
    ≈ 40 unit modules load the shipped site again and again (≈ 2,900 parses, a third of the
    unit tier's CPU), some at import. Undone at the end of the run."""
    from sparkbase.model import site as site_module
    from sparkbase.model.yamlio import load_yaml as real

    _MEMO_PATCH.setattr(site_module, "load_yaml", lambda file: load_yaml_memoised(real, file))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give the site loader its own `load_yaml` back."""
    _MEMO_PATCH.undo()


@pytest.fixture(scope="module")
def parsed_once() -> Iterator[None]:
    """Site loads in the module parse each distinct file content once (site_memo.py)."""
    from sparkbase.model import site as site_module
    from sparkbase.model.yamlio import load_yaml as real
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(site_module, "load_yaml", lambda file: load_yaml_memoised(real, file))
        yield


@pytest.fixture(scope="module")
def local() -> Iterator[Any]:
    """pyinfra's `@local` host, connected, in context (facts and commands run for real on
    this machine, as pyinfra runs them on a node)."""
    inventory = Inventory((["@local"], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    connect_all(state)
    host = inventory.get_host("@local")
    with ctx_state.use(state), ctx_host.use(host):
        yield host
