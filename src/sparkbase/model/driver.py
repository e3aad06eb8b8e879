"""The driver section: the NVIDIA driver's packages for the baseline's kernel."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sparkbase.model.kernel import KernelSpec
from sparkbase.model.types import PackagePin, PackageVersion, StrictModel


class DriverSpec(StrictModel):
    """The NVIDIA driver: one version for the user space and the kernel module.

    Debian versions as DGX OS 24.04 ships them (spark-ds41f
    experiments/2026-10-02-driver-cuda-refresh/runs/packages.json): the user-space packages
    are `<driver>-0ubuntu0.24.04.N` (N is not derivable: confirm or capture it), the kernel
    module package for a kernel is that kernel's package version plus `+1`.
    """

    version: PackageVersion = Field(description="driver version, as `nvidia-smi` reports it")
    package_version: PackageVersion = Field(
        description="Debian version of nvidia-utils-<major> (`<driver>-0ubuntu0.24.04.N`)"
    )
    branch: Literal["580-open"] = Field(default="580-open", description="driver branch")

    def packages(self, kernel: KernelSpec) -> list[PackagePin]:
        """User-space utilities and the kernel module package built for `kernel`."""
        return [self.utilities(), self.kernel_module(kernel)]

    def utilities(self) -> PackagePin:
        """The driver's user space: nvidia-utils-<major> (nvidia-smi)."""
        return PackagePin(name=f"nvidia-utils-{self.branch.split('-')[0]}", version=self.package_version)

    def kernel_source(self) -> PackagePin:
        """NVIDIA's kernel source (`nvidia-kernel-source-<branch>`, /usr/src/nvidia-<driver>) at
        the driver's Debian version: what a DKMS build against the driver reads (the memory
        saver's supported combination: source package 580.178.04-0ubuntu0.24.04.1)."""
        return PackagePin(name=f"nvidia-kernel-source-{self.branch}", version=self.package_version)

    def kernel_module(self, kernel: KernelSpec) -> PackagePin:
        """The NVIDIA kernel module package built for `kernel` (its package version plus `+1`)."""
        return PackagePin(
            name=f"linux-modules-nvidia-{self.branch}-{kernel.release}",
            version=f"{kernel.package_version}+1",
        )
