"""Every check sparkbase runs: a pure function of what a node should be (the typed model)
and its facts.

Ids read as the drift they name. One module per baseline section (`model/sections.py`:
`kernel.py`, `driver.py`, ..., `cpuset.py`), plus the cross-cutting `files.py`,
`packages.py` and `fleet.py` (after the prior `doctor`);
importing this package registers them all. A report lists them by area in the baseline's
section order, then what spans sections (`AREA_ORDER`); within an area, as the module
declares them. The package knows every module, so it lists every check; `sparkbase.audit.registry` only
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
from sparkbase.model.sections import SECTIONS

if TYPE_CHECKING:
    from sparkbase.audit.expected import Expected


#: the order of the report: each check's area (`NodeCheck.area`), the baseline's sections
#: as a baseline file lists them (a latched GPU clock beside the driver), then the rendered
#: files and the pinned packages, which span sections
AREA_ORDER = (*SECTIONS[:2], "gpu", *SECTIONS[2:], "files", "packages")
#: every node check, by id, in report order
_ORDERED = dict(sorted(NODE_CHECKS.items(),
                       key=lambda item: AREA_ORDER.index(item[1].area) if item[1].area in AREA_ORDER
                       else len(AREA_ORDER)))


def node_checks() -> dict[str, NodeCheck]:
    """Every node check, by id, in report order (`AREA_ORDER`)."""
    return _ORDERED


def fleet_checks() -> dict[str, FleetCheck]:
    """Every fleet agreement check, by id."""
    return FLEET_CHECKS


def planned_checks(expected: Expected) -> Iterator[PlannedCheck]:
    """Every check that applies to a node, by id and item, in report order."""
    for check in _ORDERED.values():
        yield from check.plan(expected)
