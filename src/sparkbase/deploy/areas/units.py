"""systemd units (shared): enabled and running, disabled and stopped, another baseline's retired."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbase.deploy.kinds import NodeReads, Recorded, Step, StepArgs

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.policy.foreign import Foreign


class UnitDisabled(StepArgs, kind="unit-disabled"):
    """A unit neither enabled nor running."""

    unit: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.units.append(self.unit)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.units import unit_disabled
        return unit_disabled(name=name, unit=self.unit)


class UnitEnabled(Recorded, kind="unit-enabled"):
    """A unit enabled and running."""

    unit: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.units.append(self.unit)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.units import unit_enabled
        return unit_enabled(name=name, unit=self.unit, baseline=self.baseline)


class UnitRetire(StepArgs, kind="unit-retire"):
    """Another baseline's unit disabled and stopped."""

    unit: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.units.append(self.unit)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import unit_retire
        return unit_retire(name=name, unit=self.unit)



def retire_units(foreign: Foreign) -> list[Step]:
    """Services only other baselines run, disabled and stopped (while their unit file still exists)."""
    return [Step(UnitRetire(unit=unit), f"retire: {unit} disabled and stopped (run only by "
                 f"{', '.join(owners)})", section="host") for unit, owners in foreign.services]
