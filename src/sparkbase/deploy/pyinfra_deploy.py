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
from sparkbase.deploy.operations import (
    activation,
    dkms,
    modeset,
    netplan,
    tuning,
)
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
