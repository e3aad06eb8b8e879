"""The one registry of what a node is asked: every area's reads, in the fact script's order.

Each baseline section (`model/sections.py`) and each shared mechanism (files, modules, units,
packages, the deploy's reads, the serving runtime) says in its own module what it reads (its
sections, and the plain files the one `files` section greps) and how its answer becomes
`NodeFacts` fields (`facts`). The lists below only order them: the script's text is this order,
so a new read goes into its area's functions (`facts/parsers/AREA.py`), not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sparkbase.facts import runtime
from sparkbase.facts.parsers import (
    cpuset,
    deploy,
    driver,
    fabric,
    files,
    host,
    kernel,
    memory,
    modules,
    nccl,
    packages,
    secure_boot,
    units,
)
from sparkbase.facts.script import FILES_SECTION, FactPlan, FileRead, Read, Reader, fenced_script
from sparkbase.model.baseline import Baseline
from sparkbase.model.host import GOVERNOR_UNIT, NVME_COALESCING_UNIT
from sparkbase.model.memory import BOOT_SWAP_UNIT

#: the plain files of the `files` section, in the order grep reads them
FILE_READS: tuple[Callable[[FactPlan], Sequence[FileRead]], ...] = (
    kernel.cmdline_files, cpuset.cpuinfo_files, memory.thp_files, modules.proc_files, host.governor_files,
    files.stamp_files, nccl.conf_files, kernel.grub_files, memory.fstab_files, host.release_files,
    driver.module_files, memory.sysctl_files, deploy.staged_files, modules.param_files, fabric.gid_files,
)


def file_reads(plan: FactPlan) -> list[FileRead]:
    """(section name, paths) of every plain file the plan reads; a path with `*` or `[`
    is a shell glob, and that section keeps grep's `FILE:line` form (several files)."""
    return [] if plan.core_only else [read for area in FILE_READS for read in area(plan)]


def _files(plan: FactPlan) -> list[Read]:
    return [(FILES_SECTION, files.grep_command(file_reads(plan)))]


#: the sections after the kernel's (a `core_only` plan asks only the kernel's and the deploy's)
SECTIONS: tuple[Callable[[FactPlan], Sequence[Read]], ...] = (
    driver.sections, _files, modules.sys_sections, secure_boot.state_sections, host.target_sections,
    fabric.address_sections, files.link_sections, secure_boot.key_sections, units.sections,
    files.hash_sections, modules.dkms_sections, host.nvme_sections, memory.swap_sections, packages.sections,
    host.boot_sections, fabric.table_sections, runtime.sections,
)
#: each area's `NodeFacts` fields, in this order (nccl reads the files', deploy DKMS's)
FACTS: tuple[Callable[[Reader, FactPlan], dict[str, Any]], ...] = (
    kernel.facts, driver.facts, files.facts, nccl.facts, fabric.facts, memory.facts, secure_boot.facts,
    host.facts, cpuset.facts, units.facts, packages.facts, modules.facts, runtime.facts, deploy.facts,
)


def sections(plan: FactPlan) -> list[Read]:
    """(section name, command line) of every section the script prints, in order."""
    middle = [] if plan.core_only else [read for area in SECTIONS for read in area(plan)]
    return [*kernel.core_sections(plan), *middle, *deploy.sections(plan)]


def build_script(plan: FactPlan) -> str:
    """The POSIX sh script: every section's command, fenced by the marker sent on stdin."""
    return "#!/bin/sh\n" + fenced_script(sections(plan))


def section_names(plan: FactPlan) -> frozenset[str]:
    """The names of every section the plan's script prints (what an answer may hold)."""
    return frozenset(name for name, _ in sections(plan))


DISPLAY_MANAGER = "display-manager.service"
#: sysctls every node reports whatever its baseline sets (the fleet must agree on them)
FLEET_SYSCTLS = ("vm.min_free_kbytes",)


def plan_for(baseline: Baseline, file_paths: Sequence[str], stamp_path: str,
             foreign_packages: Sequence[str] = ()) -> FactPlan:
    """The facts a node must report to be judged against `baseline` (and whether the
    `foreign_packages` other baselines pin are installed)."""
    host = baseline.host
    units = [DISPLAY_MANAGER, *host.disable_services]
    if host.fan_control is not None:
        units.append(host.fan_control.service)
    if host.cpu_governor is not None:
        units.append(GOVERNOR_UNIT)
    units.append(NVME_COALESCING_UNIT)
    if baseline.memory.swap_by_page_size:
        units.append(BOOT_SWAP_UNIT)
    params = [("nvidia_drm", "modeset"), ("nvidia_drm", "fbdev")]
    saver = baseline.memory.memory_saver
    if saver is not None:
        params.append((saver.module, saver.packing_parameter))
    swap = baseline.memory.swap
    fan = host.fan_control
    purge = [host.nvidia_drm.purge] if host.nvidia_drm.purge is not None else []
    factory = baseline.memory.factory_swap
    # the installer's swap file is read in swapon when the audit judges whether it is active
    judged = factory is not None and (factory.fstab == "as-installed" or factory.swapoff
                                      or baseline.memory.swap_by_page_size)
    library = baseline.nccl.library.path  # None: built into the lane's image, nothing on the host
    hashed = [*([library] if library is not None else []),
              *(path for path in file_paths if path != stamp_path)]
    return FactPlan(
        sysctls=tuple(sorted({*baseline.memory.sysctls, *FLEET_SYSCTLS})),
        units=tuple(dict.fromkeys(units)),
        slice_unit=baseline.cpuset.slice,
        hashed_paths=tuple(dict.fromkeys(hashed)),
        nccl_library_path=baseline.nccl.library.path,
        stamp_path=stamp_path,
        nvme_coalescing=True,
        hcas=tuple(baseline.fabric.hca_names()),
        gid_index=baseline.fabric.gid_index,
        module_params=tuple(params),
        memory_saver_module=saver.module if saver is not None else None,
        fan_module=fan.module if fan is not None else None,
        swap_paths=tuple(path for path in (swap.path if swap is not None else None,
                                           factory.path if factory is not None and judged else None)
                         if path),
        packages=tuple(dict.fromkeys([*(pin.name for pin in baseline.packages()), *purge,
                                      *foreign_packages])),
        # the enrolled certificates judge the DKMS modules' signatures even with no pinned key
        mok_keys=baseline.secure_boot.mok_fingerprint is not None or bool(baseline.dkms_builds()),
        efi_boot=host.uefi_first is not None,
        drm_drivers=host.drm_driver is not None,
        console_mode=host.console_text,
        watchdog=host.watchdog is not None,
    )
