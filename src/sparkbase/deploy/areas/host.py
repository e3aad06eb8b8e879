"""Host (section `host`): nvidia-drm modeset, the boot target and services, DGX OS's tuning
units (CPU governor, NVMe interrupt coalescing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbase.deploy.areas.units import UnitDisabled, UnitEnabled
from sparkbase.deploy.kinds import NodeReads, Recorded, Step, StepArgs
from sparkbase.model.host import GOVERNOR_UNIT, NVME_COALESCING_UNIT
from sparkbase.render import MODPROBE_PATH

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.model.baseline import Baseline
    from sparkbase.policy.foreign import Foreign
    from sparkbase.render import RenderedFile

#: the display manager alias every desktop image enables (gdm3, lightdm, ...)
DISPLAY_MANAGER_UNIT = "display-manager.service"


class ModesetPurge(Recorded, kind="modeset-purge"):
    """The nvidia-drm modeset options package purged, every initramfs rebuilt."""

    package: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages.append(self.package)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import modeset_purge
        return modeset_purge(name=name, package=self.package, baseline=self.baseline)


class ModesetRestore(StepArgs, kind="modeset-restore"):
    """The modeset options package sparkbase purged for another baseline, put back."""

    package: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages.append(self.package)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import modeset_restore
        return modeset_restore(name=name, package=self.package)


class InitramfsUpdate(StepArgs, kind="initramfs-update"):
    """`update-initramfs -u -k all` when the `release` image lacks the modprobe file's options."""

    release: str
    path: str
    sha256: str | None

    def reads(self, into: NodeReads, secret: bool) -> None:
        if self.sha256 is not None:
            into.initramfs.append((self.release, self.path))

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.activation import initramfs_update
        return initramfs_update(name=name, trigger=trigger, release=self.release, path=self.path,
                                sha256=self.sha256)


class DefaultTarget(StepArgs, kind="default-target"):
    """The systemd target the node boots into."""

    target: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import default_target
        return default_target(name=name, target=self.target)


class CpuGovernor(StepArgs, kind="cpu-governor"):
    """Every CPU runs `governor` (DGX OS's governor unit)."""

    governor: str
    release: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import cpu_governor
        return cpu_governor(name=name, governor=self.governor, release=self.release)


class NvmeCoalescing(Recorded, kind="nvme-coalescing"):
    """NVMe interrupt coalescing on or off (off masks the vendor unit, recorded)."""

    on: bool

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import nvme_coalescing
        return nvme_coalescing(name=name, on=self.on, baseline=self.baseline)



def modeset_steps(foreign: Foreign, baseline: Baseline) -> list[Step]:
    """Purge the nvidia-drm modeset options package the baseline names (recorded), or put
    back the one other baselines had sparkbase purge; either rebuilds every initramfs."""
    purge = baseline.host.nvidia_drm.purge
    steps = [Step(ModesetPurge(package=purge), f"purge {purge} and rebuild the initramfs (nvidia-drm "
                  "modeset on)", reboot=True, section="host")] if purge is not None else []
    steps += [
        Step(ModesetRestore(package=package), f"put back {package} at the version sparkbase purged, "
             f"rebuild the initramfs ({', '.join(owners)} purged it)", reboot=True, section="host")
        for package, owners in foreign.restore
    ]
    return steps


def initramfs_step(baseline: Baseline, files: list[RenderedFile]) -> Step:
    """nvidia-drm is loaded from the initramfs: its options act once the image is rebuilt."""
    release = baseline.kernel.release
    modprobe = next((f for f in files if f.path == MODPROBE_PATH), None)
    return Step(InitramfsUpdate(release=release, path=MODPROBE_PATH,
                                sha256=modprobe.sha256 if modprobe is not None else None),
                f"update-initramfs -u -k all (the {release} initramfs lacks the nvidia-drm options)",
                after_change_of=MODPROBE_PATH, reboot=True, section="host")


def service_steps(baseline: Baseline) -> list[Step]:
    """The boot target, the services disabled (the display manager unless the baseline keeps
    it) and fan control enabled, then DGX OS's tuning units: the CPU governor (when the
    baseline manages it) and NVMe interrupt coalescing (masking the vendor unit is recorded)."""
    host = baseline.host
    steps = [Step(DefaultTarget(target=host.boot_target), f"boot into {host.boot_target}", section="host")]
    disable = list(host.disable_services)
    if not host.display_manager and DISPLAY_MANAGER_UNIT not in disable:
        disable.insert(0, DISPLAY_MANAGER_UNIT)
    steps += [Step(UnitDisabled(unit=unit), f"{unit} disabled and stopped", section="host")
              for unit in disable]
    if host.fan_control is not None:
        unit = host.fan_control.service
        steps.append(Step(UnitEnabled(unit=unit), f"{unit} enabled and running", section="host"))
    if host.cpu_governor is not None:
        steps.append(Step(CpuGovernor(governor=host.cpu_governor, release=baseline.kernel.release),
                          f"every CPU runs {host.cpu_governor} ({GOVERNOR_UNIT})", section="host"))
    on = host.nvme.interrupt_coalescing
    steps.append(Step(NvmeCoalescing(on=on),
                      f"NVMe interrupt coalescing {'on (0x107)' if on else 'off (0, unit masked)'} "
                      f"({NVME_COALESCING_UNIT})", section="host"))
    return steps
