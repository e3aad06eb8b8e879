"""cpuset (section `cpuset`): systemd loads the pinning slice as rendered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbase.deploy.areas.activation import DaemonReload
from sparkbase.deploy.kinds import Step

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline


def slice_steps(baseline: Baseline) -> list[Step]:
    """`systemctl daemon-reload` after the slice file, or whenever systemd has not loaded it."""
    if baseline.cpuset.pinned_by != "slice":
        return []
    unit = baseline.cpuset.slice
    return [Step(DaemonReload(unit=unit), f"systemctl daemon-reload (systemd has not loaded {unit} as "
                 "on disk)", after_change_of=f"/etc/systemd/system/{unit}", section="cpuset")]
