"""Every check sparkbase runs: a pure function of what a node should be (the typed model)
and its facts.

Ids read as the drift they name. One module per baseline section (`model/sections.py`:
`kernel.py`, `driver.py`, ..., `cpuset.py`), plus the cross-cutting `files.py`,
`packages.py` and `fleet.py` (after the prior `doctor`);
importing this package registers them all, in the order below (the report order). The
package knows every module, so it lists every check; `sparkbase.audit.registry` only
registers them (each check module imports it, it imports none of them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from sparkbase.audit.checks import (
    cpuset,  # noqa: F401 - registers on import
    driver,  # noqa: F401 - registers on import
    fabric,  # noqa: F401 - registers on import
    files,  # noqa: F401 - registers on import
    fleet,  # noqa: F401 - registers on import
    host,  # noqa: F401 - registers on import
    kernel,  # noqa: F401 - registers on import
    memory,  # noqa: F401 - registers on import
    nccl,  # noqa: F401 - registers on import
    packages,  # noqa: F401 - registers on import
    secure_boot,  # noqa: F401 - registers on import
)
from sparkbase.audit.registry import FLEET_CHECKS, NODE_CHECKS, FleetCheck, NodeCheck, PlannedCheck

if TYPE_CHECKING:
    from sparkbase.audit.expected import Expected


def node_checks() -> dict[str, NodeCheck]:
    """Every node check, by id, in registry order (the modules above registered them)."""
    return NODE_CHECKS


def fleet_checks() -> dict[str, FleetCheck]:
    """Every fleet agreement check, by id."""
    return FLEET_CHECKS


def planned_checks(expected: Expected) -> Iterator[PlannedCheck]:
    """Every check that applies to a node, by id and item, in registry order."""
    for check in NODE_CHECKS.values():
        yield from check.plan(expected)
