"""Packages (shared): `apt-get update` when a pin is missing, each managed section's pins at
exact versions and held; other baselines' pins purged, or kept and reported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbase.deploy.kinds import NodeReads, Recorded, Step, StepArgs
from sparkbase.model.sections import SECTIONS

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.model.baseline import Baseline
    from sparkbase.model.types import PackagePin
    from sparkbase.policy.foreign import Foreign


class AptUpdate(StepArgs, kind="apt-update"):
    """`apt-get update`, only when one of `pins` (NAME=VERSION) is not installed."""

    pins: list[str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages += [pin.partition("=")[0] for pin in self.pins]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.packages import apt_update_for
        return apt_update_for(name=name, pins=self.pins)


class Packages(Recorded, kind="packages"):
    """The pinned packages (NAME=VERSION) installed at their exact versions."""

    pins: list[str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages += [pin.partition("=")[0] for pin in self.pins]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.packages import pinned_packages
        return pinned_packages(name=name, pins=self.pins, baseline=self.baseline)


class Hold(StepArgs, kind="hold"):
    """The packages held at their versions."""

    names: list[str]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.packages import hold
        return hold(name=name, names=self.names)


class PackagesRetire(StepArgs, kind="packages-retire"):
    """Other baselines' packages unheld and purged (a kernel's only once `target_kernel` runs)."""

    names: list[str]
    target_kernel: str | None

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages += self.names

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import packages_retire
        return packages_retire(name=name, names=self.names, target_kernel=self.target_kernel)


class PackagesKept(StepArgs, kind="packages-kept"):
    """Other baselines' packages sparkbase did not install, reported."""

    names: list[str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages += self.names

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import packages_kept
        return packages_kept(name=name, names=self.names)



def package_steps(baseline: Baseline) -> list[Step]:
    """One `apt-get update` (only when a pin is missing), then per managed section its
    pinned packages and their holds. The update belongs to the first section with pins."""
    by_section = {section: pins for section, pins in baseline.pins_by_section().items()
                  if baseline.manages(section)}
    if not by_section:
        return []
    every = [_pin_text(pin) for pins in by_section.values() for pin in pins]
    first = next(iter(by_section))
    steps = [Step(AptUpdate(pins=every), "apt-get update (only when a pin is missing)", section=first)]
    for section, pins in by_section.items():
        count = f"{len(pins)} pinned packages at exact versions" if len(pins) > 1 else \
            "1 pinned package at its exact version"
        steps += [
            Step(Packages(pins=[_pin_text(p) for p in pins]), f"{section}: {count}", section=section),
            Step(Hold(names=[pin.name for pin in pins]), f"{section}: hold its pinned packages",
                 section=section),
        ]
    return steps


def _pin_text(pin: PackagePin) -> str:
    return f"{pin.name}={pin.version}"


def retire_packages(foreign: Foreign, target: str) -> list[Step]:
    """Per section, one purge of its plain foreign pins; then one per foreign kernel, gated
    on `target`; then, per section, the report of those sparkbase did not install."""
    steps = []
    sections = [section for section in SECTIONS if any(pin.section == section for pin in foreign.pins)]
    for section in sections:
        plain = [pin.name for pin in foreign.pins if pin.kernel is None and pin.section == section]
        if plain:
            steps.append(Step(PackagesRetire(names=plain, target_kernel=None),
                              f"retire: unhold and purge {', '.join(plain)} (pinned only by other baselines "
                              "or earlier versions)",
                              section=section))
    for kernel in sorted({pin.kernel for pin in foreign.pins if pin.kernel is not None}):
        names = [pin.name for pin in foreign.pins if pin.kernel == kernel]
        steps.append(Step(PackagesRetire(names=names, target_kernel=target),
                          f"retire: unhold and purge the {kernel} kernel packages ({len(names)}; once "
                          f"{target} runs)", section="kernel"))
    for section in sections:
        names = [pin.name for pin in foreign.pins if pin.section == section]
        steps.append(Step(PackagesKept(names=names), f"keep: other baselines' {section} packages "
                          "sparkbase did not install (reported)", section=section))
    return steps
