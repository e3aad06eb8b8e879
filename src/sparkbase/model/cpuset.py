"""The cpuset section: the CPUs serving may use, and what holds the lanes to them."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from sparkbase.model.paths import SliceUnit
from sparkbase.model.types import MAX_CPU_ID, CpuId, StrictModel

_CPU_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def _cpu_list(value: object) -> object:
    """Accept `[5, 6, 7]` or the kernel's cpulist text `5-9,15-19`.

    Each range is checked against MAX_CPU_ID before it is expanded, so `5-99999999999999`
    is an error, never a list built in memory.
    """
    if not isinstance(value, str):
        return value
    cpus: list[int] = []
    for chunk in value.split(","):
        chunk = chunk.strip()
        if not chunk:
            continue
        match = _CPU_RANGE.fullmatch(chunk)
        if match is None:
            raise ValueError(f"not a CPU list: {chunk[:40]!r} (write e.g. 5-9,15-19)")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        if max(len(low_text), len(high_text)) > 9:  # no int() of a thousand digits
            raise ValueError(f"CPU {chunk[:40]} is out of range (CPU ids go up to {MAX_CPU_ID})")
        low, high = int(low_text), int(high_text)
        if high > MAX_CPU_ID:
            raise ValueError(f"CPU {high} is out of range (CPU ids go up to {MAX_CPU_ID})")
        if low > high:
            raise ValueError(f"range {chunk} runs backwards (write {high}-{low})")
        cpus.extend(range(low, high + 1))
    return cpus


class CpusetSpec(StrictModel):
    """The CPUs serving may use, and what holds the lanes to them: the systemd slice
    sparkbase writes (`pinned_by: slice`), or each lane container's own `--cpuset-cpus`
    (`pinned_by: container`: the site's containers sit in Docker's scopes, no slice is
    written or required, and each lane process's CPUs are judged at run time)."""

    slice: SliceUnit = Field(default="sparkbase-serving.slice", description="slice unit name")
    pinned_by: Literal["slice", "container"] = Field(
        default="slice",
        description="what holds serving to the CPUs: the slice sparkbase writes, or each lane "
        "container's --cpuset-cpus (no slice written or checked)",
    )
    cpus: Annotated[list[CpuId], BeforeValidator(_cpu_list)] = Field(
        min_length=1,
        max_length=MAX_CPU_ID + 1,
        description="AllowedCPUs of the slice (list or cpulist text like 5-9,15-19)",
    )

    def cpulist(self) -> str:
        """The CPUs as the kernel's compact cpulist text (`5-9,15-19`)."""
        cpus = sorted(set(self.cpus))
        ranges: list[str] = []
        start = prev = cpus[0]
        for cpu in [*cpus[1:], None]:
            if cpu is not None and cpu == prev + 1:
                prev = cpu
                continue
            ranges.append(f"{start}-{prev}" if prev != start else str(start))
            if cpu is not None:
                start = prev = cpu
        return ",".join(ranges)
