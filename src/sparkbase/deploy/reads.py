"""What plan and apply read of a node, as one `FactPlan` made from its steps: the paths,
units, packages and kernels the steps' operations decide on, plus the boot and MOK state the
reboot reasons read. The node is then read once (`deploy/node.py`), by the audit's script."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sparkbase.deploy.reboot import STAGED_PATH
from sparkbase.deploy.steps import Step
from sparkbase.facts.script import GRUB_CFG, FactPlan
from sparkbase.model.dgxos import GOVERNOR_UNIT, NVME_COALESCING_UNIT
from sparkbase.policy.fstab import FSTAB


@dataclass
class _Reads:
    """What the steps read, collected in order (each once)."""

    states: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    sysctls: list[str] = field(default_factory=list)
    newer: list[tuple[str, str]] = field(default_factory=list)
    reload: list[str] = field(default_factory=list)
    modinfo: list[tuple[str, str]] = field(default_factory=list)
    sources: list[tuple[str, str]] = field(default_factory=list)
    swaps: list[str] = field(default_factory=list)
    initramfs: list[tuple[str, str]] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    netplan: bool = False

    def add(self, step: Step) -> None:
        """What the operation of `step` reads while it is planned."""
        a = step.args
        kind = step.kind
        if kind in ("file", "upload", "directory", "file-retire", "netplan-takeover"):
            self.states.append(str(a["path"]))
        if kind == "file" and not step.secret:
            self.texts.append(str(a["path"]))
        if kind in ("factory-swap", "factory-swap-restore"):
            self.states.append(FSTAB)
        if kind in ("factory-swap", "factory-swap-restore", "swap-retire"):
            self.texts.append(FSTAB)
        if kind in ("apt-update", "packages"):
            self.packages += [str(pin).partition("=")[0] for pin in a["pins"]]
        if kind in ("packages-retire", "packages-kept"):
            self.packages += [str(name) for name in a["names"]]
        if kind in ("modeset-purge", "modeset-restore"):
            self.packages.append(str(a["package"]))
        if kind in ("unit-retire", "unit-disabled", "unit-enabled"):
            self.units.append(str(a["unit"]))
        if kind == "sysctl-apply":
            self.sysctls += [str(key) for key in a["values"]]
        if kind == "grub-update":
            self.newer.append((str(a["dropin"]), GRUB_CFG))
        if kind == "daemon-reload":
            self.reload.append(str(a["unit"]))
        if kind == "dkms-install":
            self.modinfo.append((str(a["kernel"]), str(a["module"])))
        if kind == "dkms-source":
            self.sources.append((str(a["dkms_name"]), str(a["version"])))
        if kind in ("swap-retire", "swap-file", "factory-swapon"):
            self.swaps.append(str(a["path"]))
        if kind == "initramfs-update" and a.get("sha256") is not None:
            self.initramfs.append((str(a["release"]), str(a["path"])))
        if kind == "mok-dir-retire":
            self.entries.append(str(a["path"]))
        self.netplan = self.netplan or kind in ("netplan-files", "netplan-takeover")


def _once(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def fact_plan(steps: Iterable[Step]) -> FactPlan:
    """The one read of a node that plan and apply of `steps` decide on."""
    reads = _Reads()
    for step in steps:
        reads.add(step)
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
