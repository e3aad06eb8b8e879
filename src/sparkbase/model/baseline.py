"""The typed host baseline: everything one DGX Spark host profile pins.

A baseline file in `baselines/NAME.yaml` validates into `Baseline`. Baselines may
`extends:` another; the merge happens on the raw data before validation (see `site.py`).
Rules that relate fields to each other live in `rules.py`, so that each can point at the
exact field to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from sparkbase.model.cpuset import CpusetSpec
from sparkbase.model.driver import DriverSpec
from sparkbase.model.fabric import FabricSpec
from sparkbase.model.host import HostSpec
from sparkbase.model.kernel import TOOLS_PACKAGE_STEM, KernelSpec
from sparkbase.model.memory import DkmsSource, MemorySpec
from sparkbase.model.nccl import NcclSpec
from sparkbase.model.provenance import Source, SourceKey
from sparkbase.model.sections import SECTIONS, Section, in_order, section_name
from sparkbase.model.secure_boot import SecureBootSpec
from sparkbase.model.shapes import Shape
from sparkbase.model.types import Name, PackageName, PackagePin, SemVer, StrictModel

#: a `managed:` entry: a section name (an unknown one says which was meant)
ManagedSection = Annotated[Section, BeforeValidator(section_name)]


class OsSpec(StrictModel):
    """The operating system image the baseline was qualified on."""

    release: str = Field(
        description="DGX OS release, as /etc/dgx-release names it (informational, audited as a warning)",
        max_length=64,
        pattern=r"^[A-Za-z0-9 ._-]+$",
    )


class RetiredPackage(StrictModel):
    """A package an earlier version of the baseline pinned and this one does not: sparkbase
    retires it like another baseline's pin (unheld and purged where it recorded installing
    it and the version is unchanged, else reported and kept; `policy/foreign.py`)."""

    name: PackageName = Field(description="Debian package name")
    section: ManagedSection = Field(description="the section whose pins held it (retired only where both "
                                    "this baseline and the node's manage it)")


class Baseline(StrictModel):
    """One host profile. Its name is its file name (`baselines/NAME.yaml`).

    Its host sections (kernel, driver, nccl, fabric, memory, secure_boot, host, cpuset) say
    what a node must be; `managed` says which of them sparkbase writes (the others are as
    found: judged, never written; `sparkbase.model.sections`).
    """

    version: SemVer = Field(description="version of this baseline; bump on any change it renders")
    description: str = Field(default="", max_length=500, description="what this profile is for")
    extends: Name | None = Field(default=None, description="baseline this one starts from")
    abstract: bool = Field(
        default=False, description="a partial profile other baselines extend; never assigned"
    )
    os: OsSpec = Field(description="operating system image")
    kernel: KernelSpec = Field(description="kernel, page size and command line")
    driver: DriverSpec = Field(description="NVIDIA driver")
    nccl: NcclSpec = Field(description="NCCL library and settings")
    fabric: FabricSpec = Field(description="ConnectX-7 ring fabric")
    memory: MemorySpec = Field(description="memory policy")
    secure_boot: SecureBootSpec = Field(description="Secure Boot and MOK")
    host: HostSpec = Field(description="host settings")
    cpuset: CpusetSpec = Field(description="serving cpuset")
    shapes: list[Shape] = Field(min_length=1, description="shapes this baseline is qualified for")
    managed: Annotated[list[ManagedSection], AfterValidator(in_order)] = Field(
        default_factory=lambda: list(SECTIONS),
        description="the sections sparkbase writes on the node (default: all); a section not listed is "
        "as found: never written, installed, removed or restarted, its effective values still "
        "audited (see sparkbase.model.sections)",
        json_schema_extra={"uniqueItems": True},
    )
    retired_packages: list[RetiredPackage] = Field(
        default_factory=list,
        max_length=100,
        description="packages earlier versions of this baseline pinned and it no longer does: retired "
        "from nodes where sparkbase installed them (else reported and kept)",
    )
    sources: dict[SourceKey, Source] = Field(
        default_factory=dict,
        max_length=500,
        exclude=True,  # where a value comes from is not what is rendered or pinned
        description="where each value comes from: dotted field path -> source (see provenance.py)",
    )

    def shape(self, name: str) -> Shape | None:
        """The qualified shape called `name`, if any."""
        return next((shape for shape in self.shapes if shape.name == name), None)

    def manages(self, section: Section) -> bool:
        """Whether sparkbase writes `section` on the node (else it is as found)."""
        return section in self.managed

    def unmanaged(self) -> list[Section]:
        """The sections left as found, in the baseline's order."""
        return [section for section in SECTIONS if section not in self.managed]

    def pins_by_section(self) -> dict[Section, list[PackagePin]]:
        """Every package the baseline pins, by the section it belongs to, in install order.

        A package built for one kernel (its image, headers, modules, tools and the NVIDIA
        module package built for it) is the kernel section's: it is installed and retired
        with that kernel, never apart from it (a kernel without its NVIDIA module boots with
        no GPU). The driver section is the driver's user space.
        """
        fallback = self.kernel.fallback
        kernel = [*self.kernel.packages(), self.driver.kernel_module(self.kernel)]
        if fallback is not None:
            kernel.extend(fallback.packages(self.driver.branch))
            if self.kernel.tools:  # the governor unit runs cpupower on the fallback kernel too
                kernel.append(PackagePin(name=f"{TOOLS_PACKAGE_STEM}-{fallback.release}",
                                         version=fallback.package_version))
        library = self.nccl.library.pin()
        saver = self.memory.memory_saver
        fan = self.host.fan_control
        pins: dict[Section, list[PackagePin]] = {
            "kernel": kernel,
            "driver": [self.driver.utilities()],
            "nccl": [library] if library is not None else [],
            # the saver's build reads NVIDIA's packaged kernel source at the driver's exact version
            "memory": ([self.driver.kernel_source()] if saver is not None and saver.required else []),
            "host": [*([PackagePin(name=fan.package, version=fan.package_version)] if fan else []),
                     *self.host.packages],
        }
        return {section: pins[section] for section in SECTIONS if pins.get(section)}

    def packages(self) -> list[PackagePin]:
        """Every package the baseline pins, section by section in install order
        (`host.packages` last)."""
        return [pin for pins in self.pins_by_section().values() for pin in pins]

    def dkms_builds(self) -> list[DkmsBuild]:
        """Every module DKMS must build, sign (under Secure Boot) and install for the kernel:
        the memory saver when required, and fan control."""
        builds = []
        saver = self.memory.memory_saver
        if saver is not None and saver.required:
            builds.append(DkmsBuild("memory saver", saver.dkms_name, saver.dkms_version, saver.module,
                                    "memory", saver.source))
        fan = self.host.fan_control
        if fan is not None:
            builds.append(DkmsBuild("fan control", fan.dkms_name, fan.dkms_version, fan.module, "host"))
        return builds


@dataclass(frozen=True)
class DkmsBuild:
    """One module DKMS builds for the baseline's kernel: what it is for, its DKMS name and
    version, and the kernel module it installs."""

    purpose: str
    dkms_name: str
    dkms_version: str
    module: str
    #: the section whose steps build it (`memory` for the memory saver, `host` for fan control)
    section: Section
    #: the checkout apply places and registers (None: a package installs the source tree)
    source: DkmsSource | None = None
