"""The host section: boot target, display, nvidia-drm, NVMe, fans, governor, services, packages,
and the DGX OS units it drives.

sparkbase does not write DGX OS's units: DGX OS ships them, and a baseline only decides
whether they run. Every value here has a public source (docs/sources/ds41f-research.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from sparkbase.model.paths import DisableableUnit
from sparkbase.model.types import Name, PackageName, PackagePin, PackageVersion, StrictModel

#: DGX OS's governor unit (package nv-cpu-governor): `Type=idle`,
#: `ExecStart=/usr/bin/cpupower frequency-set -g performance`. `/usr/bin/cpupower` is
#: Ubuntu's linux-tools wrapper: it runs `/usr/lib/linux-tools/$(uname -r)/cpupower` and
#: fails (exit 2) without `linux-tools-<running kernel>` (spark-ds41f
#: experiments/2026-10-02-kernel-64k/boot-test/README.md, 0e3b624e: "`nv-cpu-governor`
#: initially failed because the matching `linux-tools` package was missing")
GOVERNOR_UNIT = "nv-cpu-governor.service"

#: DGX OS's NVMe coalescing unit (package nvidia-nvme-options): runs
#: NVME_COALESCING_SCRIPT `enable` at every boot, which sets NVMe feature 0x08 to 0x107
#: (spark-ds41f experiments/2026-10-02-nvme-coalescing/README.md, 3df77d2e)
NVME_COALESCING_UNIT = "nvidia-nvme-interrupt-coalescing.service"
#: the script the unit runs; `disable` writes 0 now (spark-ds41f docs/setup.md, cff464c6)
NVME_COALESCING_SCRIPT = "/usr/bin/nvidia-nvme-interrupt-coalescing.sh"
#: NVMe feature id of Interrupt Coalescing
NVME_COALESCING_FEATURE = 0x08
#: the value DGX OS sets: one interrupt per 8 completions (THR 7, 0-based) or after 100 µs
NVME_COALESCING_ON = 0x107
#: the NVMe reset value: coalescing off
NVME_COALESCING_OFF = 0
#: the controller the recipe reads and sets (`nvme get-feature /dev/nvme0 -f 8`)
NVME_DEVICE = "/dev/nvme0"


def coalescing_value(on: bool) -> int:
    """Feature 0x08 as a baseline's `host.nvme.interrupt_coalescing` wants it."""
    return NVME_COALESCING_ON if on else NVME_COALESCING_OFF


#: the only packages `host.nvidia_drm.purge` may name: DGX OS's nvidia-drm options package
#: that forces a modeset value (`nvidia-drm-options-modeset0` turns it off; spark-ds41f
#: docs/setup.md "Kernel mode setting"), never a free package name
ModesetOptionsPackage = Annotated[str, StringConstraints(pattern=r"^nvidia-drm-options-modeset[0-9]$")]


class NvidiaDrmSpec(StrictModel):
    """nvidia-drm module parameters (modprobe.d), and the DGX OS options package that
    overrides them from the initramfs."""

    modeset: bool = Field(description="nvidia-drm modeset=1")
    fbdev: bool = Field(description="nvidia-drm fbdev=1")
    purge: ModesetOptionsPackage | None = Field(
        default=None,
        description="DGX OS's nvidia-drm-options-modeset<N> package to purge (then the initramfs "
        "is rebuilt for every kernel and the node reboots); the version removed is recorded and "
        "reinstalled when the node moves back to a baseline that keeps it",
    )


class NvmeSpec(StrictModel):
    """NVMe power and interrupt settings."""

    apst: Literal["default", "disabled"] = Field(
        description="Autonomous Power State Transition: 'disabled' pins the drive awake"
    )
    interrupt_coalescing: bool = Field(
        default=True,
        description="NVMe interrupt coalescing: true = DGX OS's default (its "
        "nvidia-nvme-interrupt-coalescing.service sets feature 0x08 to 0x107 at boot); false = that "
        "unit masked (recorded, undone on move-back) and the feature set to 0",
    )


class FanControlSpec(StrictModel):
    """Fan control (spark-ds41f, christopherowen/dgx-spark-fan-control): a DKMS module
    (`dgx_ec_fan_control`) that DKMS builds and signs with the fleet MOK key, loaded at boot
    by a modules-load.d entry, and the daemon that sets the fan floor."""

    package: PackageName = Field(
        description="package that installs the DKMS source tree, the daemon and its unit"
    )
    package_version: PackageVersion = Field(description="exact version of that package")
    dkms_name: Name = Field(description="DKMS module name (dkms status)")
    dkms_version: Name = Field(description="DKMS module version")
    module: Name = Field(
        description="kernel module name as loaded (/proc/modules), listed in /etc/modules-load.d/MODULE.conf"
    )
    service: DisableableUnit = Field(
        description="unit that must be enabled and active (disabled on other baselines' nodes)"
    )

    @property
    def modules_load_path(self) -> str:
        """The modules-load.d entry that loads the module at boot (dgx-spark-fan-control
        docs/installation.md: /etc/modules-load.d/dgx_ec_fan_control.conf)."""
        return f"/etc/modules-load.d/{self.module}.conf"


#: a UEFI boot entry's label, as `efibootmgr` prints it (matched case-insensitively)
BootLabel = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._()-]{0,63}$")]
#: a kernel driver name (the basename of `/sys/class/drm/cardN/device/driver`)
DriverName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")]
#: a systemd time span as `systemctl show` prints it (`30s`, `10min`, `0`, `infinity`)
TimeSpan = Annotated[str, StringConstraints(
    pattern=r"^(0|infinity|([0-9]+(us|ms|s|min|h|d)( [0-9]+(us|ms|s|min|h|d))*))$")]


class WatchdogSpec(StrictModel):
    """systemd's hardware watchdog (system.conf `RuntimeWatchdogSec`, `RebootWatchdogSec`), as
    `systemctl show` reads them back (`RuntimeWatchdogUSec`, `RebootWatchdogUSec`)."""

    runtime: TimeSpan = Field(description="RuntimeWatchdogUSec: PID 1 pings the watchdog within this")
    reboot: TimeSpan = Field(description="RebootWatchdogUSec: a reboot that hangs longer is forced")


class HostSpec(StrictModel):
    """Host-level settings: boot target, display, NVMe, fans, services, extra packages."""

    boot_target: Literal["multi-user.target", "graphical.target"] = Field(
        description="systemd default target"
    )
    display_manager: bool = Field(description="a display manager may run (false: headless)")
    nvidia_drm: NvidiaDrmSpec = Field(description="nvidia-drm module parameters")
    nvme: NvmeSpec = Field(description="NVMe power settings")
    cpu_governor: Literal["performance"] | None = Field(
        default=None,
        description="scaling_governor of every CPU, set at boot by DGX OS's nv-cpu-governor.service "
        "(which sets performance only; needs kernel.tools); null: not managed or judged",
    )
    fan_control: FanControlSpec | None = Field(default=None, description="fan control, or none")
    disable_services: list[DisableableUnit] = Field(
        default_factory=list, description="units that must be disabled and stopped"
    )
    packages: list[PackagePin] = Field(
        default_factory=list, description="further packages held at exact versions"
    )
    uefi_first: BootLabel | None = Field(
        default=None,
        description="label of the UEFI boot entry that must come first in BootOrder (the installed "
        "OS, e.g. 'ubuntu'); null: not judged",
    )
    drm_driver: DriverName | None = Field(
        default=None, description="driver a DRM card must belong to (e.g. 'nvidia'); null: not judged"
    )
    console_text: bool = Field(
        default=False,
        description="the active virtual console must be in text mode (KDGETMODE = KD_TEXT); "
        "false: not judged",
    )
    watchdog: WatchdogSpec | None = Field(
        default=None, description="systemd's watchdog settings as PID 1 runs them; null: not judged"
    )
