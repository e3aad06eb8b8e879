"""Kernel (section `kernel`): grub.cfg regenerated when it does not boot the baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbase.deploy.kinds import NodeReads, Step, StepArgs
from sparkbase.facts.parsers.kernel import GRUB_CFG
from sparkbase.model.cmdline import rendered_kernel_args
from sparkbase.render import GRUB_DROPIN_PATH

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.model.baseline import Baseline


class GrubUpdate(StepArgs, kind="grub-update"):
    """`update-grub` when the drop-in changed or grub.cfg does not boot the baseline."""

    release: str
    default_entry: str | None
    cmdline: list[str]
    forbid: list[str]
    fallback: str | None
    dropin: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.newer.append((self.dropin, GRUB_CFG))

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.kernel import grub_update
        return grub_update(name=name, trigger=trigger, release=self.release,
                           default_entry=self.default_entry, cmdline=self.cmdline, forbid=self.forbid,
                           fallback=self.fallback, dropin=self.dropin)



def grub_update_step(baseline: Baseline) -> Step:
    """`update-grub` after the drop-in, or whenever grub.cfg does not boot the baseline."""
    kernel = baseline.kernel
    entry = kernel.grub_entry if kernel.pin_grub_default else None
    fallback = kernel.fallback.release if kernel.fallback is not None else None
    return Step(GrubUpdate(release=kernel.release, default_entry=entry,
                           cmdline=rendered_kernel_args(baseline), forbid=list(kernel.cmdline_forbid),
                           fallback=fallback, dropin=GRUB_DROPIN_PATH),
                "update-grub (grub.cfg is older than the GRUB drop-in, or does not boot the baseline as it "
                "says)", reboot=True, after_change_of=GRUB_DROPIN_PATH, section="kernel")
