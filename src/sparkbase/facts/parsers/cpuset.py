"""CPUs (section `cpuset`): which are the GB10's fast cores, CPU lists as systemd and the
kernel print them (the cpufreq governors: `host.py`)."""

from __future__ import annotations

import re
from typing import Any

from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.script import FactPlan, Reader, fixed

#: `CPU part` of the GB10's Cortex-X925 (fast) cores
FAST_CPU_PART = "0xd85"


def parse_fast_cpus(cpuinfo: str) -> tuple[int, ...]:
    """`/proc/cpuinfo` → processors whose `CPU part` is the Cortex-X925's (0xd85)."""
    fast: list[int] = []
    processor: int | None = None
    for line in node_lines(cpuinfo):
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            processor = int(value)
        elif key == "CPU part" and processor is not None and value.lower() == FAST_CPU_PART:
            fast.append(processor)
    return tuple(sorted(fast))


def parse_cpu_list(text: str) -> frozenset[int]:
    """A CPU list in any form Linux tools print → the set of CPUs.

    systemd prints `AllowedCPUs=5-9 15-19` and `CPUAffinity=3 4 5 6 7` (space-separated),
    the kernel and `cpuset.cpus` print `5-9,15-19`; both separators may mix. Empty → empty.
    """
    cpus: set[int] = set()
    for part in re.split(r"[\s,]+", text.strip()):
        if not part:
            continue
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"not a CPU list: {text!r}")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise ValueError(f"descending CPU range {part!r} in {text!r}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: frozenset[int] | set[int]) -> str:
    """A CPU set as the kernel's list form (`5-9,15-19`)."""
    ranges: list[str] = []
    for cpu in sorted(cpus):
        if ranges and ranges[-1].rsplit("-", 1)[-1] == str(cpu - 1):
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


#: /proc/cpuinfo (the slice's CPUs are read with the units: `units.facts`)
cpuinfo_files = fixed(("cpuinfo", ("/proc/cpuinfo",)))


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The cpuset's `NodeFacts` fields."""
    return {"fast_cpus": r.parse("cpuinfo", parse_fast_cpus) or ()}
