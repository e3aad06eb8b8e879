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
