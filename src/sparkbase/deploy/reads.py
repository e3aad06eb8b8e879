"""What plan and apply read of a node, as one `FactPlan` made from its steps: the paths,
units, packages and kernels the steps' operations decide on (each kind says its own,
`kinds.StepArgs.reads`), plus the boot and MOK state the reboot reasons read. The node is
then read once (`deploy/node.py`), by the audit's script."""

from __future__ import annotations

from collections.abc import Iterable

from sparkbase.deploy.kinds import NodeReads, Step
from sparkbase.deploy.reboot import STAGED_PATH
from sparkbase.facts.script import FactPlan
from sparkbase.model.host import GOVERNOR_UNIT, NVME_COALESCING_UNIT


def _once(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def fact_plan(steps: Iterable[Step]) -> FactPlan:
    """The one read of a node that plan and apply of `steps` decide on."""
    reads = NodeReads()
    for step in steps:
        step.args.reads(reads, step.secret)
    return FactPlan(
        sysctls=_once(reads.sysctls),
        units=_once([*reads.units, GOVERNOR_UNIT, NVME_COALESCING_UNIT]),
        packages=_once(reads.packages),
        module_params=(("nvidia_drm", "modeset"), ("nvidia_drm", "fbdev")),
        nvme_coalescing=True,
        netplan_files=reads.netplan,
        file_states=_once(reads.states),
        file_texts=_once(reads.texts),
        newer=tuple(dict.fromkeys(reads.newer)),
        need_reload=_once(reads.reload),
        kernel_modinfo=tuple(dict.fromkeys(reads.modinfo)),
        dkms_sources=tuple(dict.fromkeys(reads.sources)),
        dkms_status=True,
        held=True,
        swapon=True,
        swap_files=_once(reads.swaps),
        initramfs=tuple(dict.fromkeys(reads.initramfs)),
        dir_entries=_once(reads.entries),
        ownership=True,
        staged_path=STAGED_PATH,
    )
