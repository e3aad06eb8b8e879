"""Turn a node's `Step`s into pyinfra operation calls for the host in context.

Shared by the native deploy file (`deploys/baseline.py`, run by plain `pyinfra`) and by
sparkbase's in-process runner, so both converge a node the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyinfra.operations import files

from sparkbase.deploy import operations as ops
from sparkbase.deploy import retire
from sparkbase.deploy.fact_memo import Ask
from sparkbase.deploy.facts import BootState, MokState
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
from sparkbase.deploy.steps import WRITING_KINDS, Step


@dataclass
class AddedOp:
    """A step and the pyinfra operation that ensures it on one host."""

    step: Step
    meta: Any  # pyinfra OperationMeta
    #: why the operation changes nothing ("" when it changes, or gave no reason)
    reason: str = ""


def _sha256_file(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _file(step: Step, prior: dict[str, Any]) -> Any:
    content = str(step.args["content"])
    return ops.file(
        name=f"file {step.args['path']}",
        path=step.args["path"],
        content=content,
        mode=step.args["mode"],
        sha256=hashlib.sha256(content.encode()).hexdigest(),
        baseline=step.args.get("baseline", ""),
    )


def _upload(step: Step, prior: dict[str, Any]) -> Any:
    return ops.upload(
        name=step.name,
        path=step.args["path"],
        local=step.args["local"],
        mode=step.args["mode"],
        sha256=_sha256_file(step.args["local"]),
        baseline=step.args.get("baseline", ""),
    )


def _fstab_line(step: Step, prior: dict[str, Any]) -> Any:
    return files.line(
        name=step.name,
        path=step.args["path"],
        line=step.args["match"],
        replace=step.args["line"],
        extended_regex=True,
    )


def _fstab_line_absent(step: Step, prior: dict[str, Any]) -> Any:
    return files.line(
        name=step.name,
        path=step.args["path"],
        line=step.args["match"],
        present=False,
        extended_regex=True,
    )


def _trigger(step: Step, prior: dict[str, Any]) -> Any:
    return prior.get(step.after_change_of or "")


def _simple(op: Callable[..., Any]) -> Callable[[Step, dict[str, Any]], Any]:
    def add(step: Step, prior: dict[str, Any]) -> Any:
        return op(name=step.name, **dict(step.args))

    return add


def _grub(step: Step, prior: dict[str, Any]) -> Any:
    return ops.grub_update(name=step.name, trigger=_trigger(step, prior), **dict(step.args))


def _follow_up(op: Callable[..., Any]) -> Callable[[Step, dict[str, Any]], Any]:
    """A follow-up operation, told which earlier file operation it follows (`trigger`)."""
    def add(step: Step, prior: dict[str, Any]) -> Any:
        return op(name=step.name, trigger=_trigger(step, prior), **dict(step.args))

    return add


#: step kind -> adds the pyinfra operation for it (given earlier file ops by path)
ADDERS: dict[str, Callable[[Step, dict[str, Any]], Any]] = {
    "apt-update": _simple(ops.apt_update_for),
    "packages": _simple(ops.pinned_packages),
    "hold": _simple(ops.hold),
    "directory": _simple(ops.directory),
    "upload": _upload,
    "mok-import": _simple(ops.mok_import),
    "dkms-source": _simple(dkms.dkms_source),
    "dkms-install": _simple(ops.dkms_install),
    "dkms-retire": _simple(retire.dkms_retire),
    "packages-retire": _simple(retire.packages_retire),
    "packages-kept": _simple(retire.packages_kept),
    "mok-dir-retire": _simple(retire.mok_dir_retire),
    "mok-kept": _simple(retire.mok_kept),
    "unit-retire": _simple(retire.unit_retire),
    "file-retire": _simple(retire.file_retire),
    "modeset-purge": _simple(modeset.modeset_purge),
    "modeset-restore": _simple(modeset.modeset_restore),
    "file": _file,
    "netplan-files": _simple(netplan.netplan_files),
    "netplan-takeover": _simple(netplan.netplan_takeover),
    "grub-update": _grub,
    "sysctl-apply": _simple(ops.sysctl_apply),
    "daemon-reload": _follow_up(activation.daemon_reload),
    "netplan-apply": _follow_up(activation.netplan_apply),
    "initramfs-update": _follow_up(activation.initramfs_update),
    "swap-retire": _simple(retire.swap_retire),
    "factory-swap": _simple(fstab_ops.factory_swap),
    "factory-swap-restore": _simple(fstab_ops.factory_swap_restore),
    "factory-swapon": _simple(fstab_ops.factory_swapon),
    "swap-file": _simple(ops.swap_file),
    "fstab-line": _fstab_line,
    "fstab-line-absent": _fstab_line_absent,
    "swapon": _simple(ops.swapon),
    "thp": _simple(ops.thp),
    "default-target": _simple(ops.default_target),
    "unit-disabled": _simple(ops.unit_disabled),
    "unit-enabled": _simple(ops.unit_enabled),
    "cpu-governor": _simple(tuning.cpu_governor),
    "nvme-coalescing": _simple(tuning.nvme_coalescing),
}


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
    return asks + [ask for step in steps for ask in ASKS[step.kind](**dict(step.args))]


def add_steps(steps: list[Step]) -> list[AddedOp]:
    """Add one pyinfra operation per step for the current host, in order, each with the
    reason it changes nothing (if it says one)."""
    added: list[AddedOp] = []
    by_path: dict[str, Any] = {}
    for step in steps:
        with ops.noop_reasons() as reasons:
            meta = ADDERS[step.kind](step, by_path)
        if step.kind in WRITING_KINDS:
            by_path[str(step.args["path"])] = meta
        added.append(AddedOp(step, meta, reasons[-1] if reasons else ""))
    return added
