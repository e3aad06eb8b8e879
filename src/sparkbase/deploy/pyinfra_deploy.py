"""Turn a node's `Step`s into pyinfra operation calls for the host in context.

Shared by the native deploy file (`deploys/baseline.py`, run by plain `pyinfra`) and by
sparkbase's in-process runner, so both converge a node the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyinfra.api.operation import OperationMeta

from sparkbase.deploy import operations as ops
from sparkbase.deploy import retire
from sparkbase.deploy.fact_memo import Ask
from sparkbase.deploy.facts import BootState, MokState
from sparkbase.deploy.kinds import Writes
from sparkbase.deploy.operations import (
    activation,
    boot,
    dkms,
    host,
    memory,
    modeset,
    netplan,
    packages,
    secure_boot,
    tuning,
)
from sparkbase.deploy.operations import files as file_ops
from sparkbase.deploy.operations import fstab as fstab_ops
from sparkbase.deploy.steps import Step


@dataclass
class AddedOp:
    """A step and the pyinfra operation that ensures it on one host."""

    step: Step
    meta: OperationMeta
    #: why the operation changes nothing ("" when it changes, or gave no reason)
    reason: str = ""


def _asks_nothing(**_: Any) -> list[Ask]:
    return []


#: step kind -> the facts its operation reads while it is planned, given the step's arguments
#: (each op module says its own, next to the operation; `fact_memo` reads them in one batch)
ASKS: dict[str, Callable[..., list[Ask]]] = {
    "apt-update": packages.packages_asks,
    "packages": packages.packages_asks,
    "hold": packages.hold_asks,
    "directory": file_ops.directory_asks,
    "upload": file_ops.upload_asks,
    "mok-import": secure_boot.mok_import_asks,
    "dkms-source": dkms.dkms_source_asks,
    "dkms-install": dkms.dkms_install_asks,
    "dkms-retire": retire.dkms_retire_asks,
    "packages-retire": retire.packages_retire_asks,
    "packages-kept": retire.packages_kept_asks,
    "mok-dir-retire": retire.mok_dir_retire_asks,
    "mok-kept": retire.mok_kept_asks,
    "unit-retire": retire.unit_retire_asks,
    "file-retire": retire.file_retire_asks,
    "modeset-purge": modeset.modeset_purge_asks,
    "modeset-restore": modeset.modeset_restore_asks,
    "file": file_ops.file_asks,
    "netplan-files": netplan.netplan_files_asks,
    "netplan-takeover": netplan.netplan_takeover_asks,
    "grub-update": boot.grub_update_asks,
    "sysctl-apply": memory.sysctl_apply_asks,
    "daemon-reload": activation.daemon_reload_asks,
    "netplan-apply": activation.netplan_apply_asks,
    "initramfs-update": activation.initramfs_update_asks,
    "swap-retire": retire.swap_retire_asks,
    "factory-swap": fstab_ops.factory_swap_asks,
    "factory-swap-restore": fstab_ops.factory_swap_restore_asks,
    "factory-swapon": fstab_ops.factory_swapon_asks,
    "swap-file": memory.swap_file_asks,
    # pyinfra's own `files.line` reads its facts itself (one round trip, not memoised)
    "fstab-line": _asks_nothing,
    "fstab-line-absent": _asks_nothing,
    "swapon": memory.swapon_asks,
    "thp": memory.thp_asks,
    "default-target": host.default_target_asks,
    "unit-disabled": host.unit_asks,
    "unit-enabled": host.unit_asks,
    "cpu-governor": tuning.cpu_governor_asks,
    "nvme-coalescing": tuning.nvme_coalescing_asks,
}


def asks_for(steps: list[Step]) -> list[Ask]:
    """Every fact a prepare of `steps` reads: the boot and MOK state (the reboot reasons),
    then what each step's operation reads while it is planned (repeats included)."""
    asks = [Ask.of(BootState), Ask.of(MokState)]
    return asks + [ask for step in steps for ask in ASKS[step.kind](**step.args.as_dict())]


def add_steps(steps: list[Step]) -> list[AddedOp]:
    """Add one pyinfra operation per step for the current host, in order, each with the
    reason it changes nothing (if it says one)."""
    added: list[AddedOp] = []
    by_path: dict[str, OperationMeta] = {}
    for step in steps:
        with ops.noop_reasons() as reasons:
            meta = step.args.add(step.name, by_path.get(step.after_change_of or ""))
        if isinstance(step.args, Writes):
            by_path[step.args.path] = meta
        added.append(AddedOp(step, meta, reasons[-1] if reasons else ""))
    return added
