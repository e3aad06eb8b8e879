"""The GPU: `nvidia-smi --query-gpu=… --format=csv` answers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sparkbase.facts.model import GpuFacts
from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.parsers.modules import parse_module_attrs
from sparkbase.facts.script import FactPlan, Read, Reader, cmd, fixed

#: version and source hash of every loaded NVIDIA module (`MODULE_VERSION` modules only)
NVIDIA_MODULE_GLOBS = ("/sys/module/nvidia*/version", "/sys/module/nvidia*/srcversion")

#: what nvidia-smi prints for a field the GPU does not report (GB10: memory.*)
NOT_AVAILABLE = {"[N/A]", "N/A", "[Not Supported]", "Not Supported"}
#: the query the fact script runs (`--format=csv,noheader,nounits`): clock, power, load and
#: clock-event reasons come from one nvidia-smi call, so they describe the same moment
GPU_QUERY = ("driver_version", "clocks.sm", "power.draw", "utilization.gpu", "clocks_event_reasons.active")


def parse_nvidia_smi_csv(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """`nvidia-smi --query-gpu=F1,F2… --format=csv[,noheader]` → one dict per GPU.

    A header line (`name, driver_version [MHz], …`) is skipped; `[N/A]` is None.
    """
    rows: list[dict[str, str | None]] = []
    for line in node_lines(text):
        if not line.strip():
            continue
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            raise ValueError(f"expected {len(fields)} fields, got {line!r}")
        if values[0].split(" [")[0] == fields[0]:
            continue  # the header
        pairs = zip(fields, values, strict=True)
        rows.append({key: (None if value in NOT_AVAILABLE else value) for key, value in pairs})
    return rows


def parse_nvidia_smi_query(text: str, status: int) -> GpuFacts:
    """`nvidia-smi --query-gpu=<GPU_QUERY> --format=csv,noheader,nounits`.

    A failing nvidia-smi (no driver, library mismatch, latched NVML) is a fact too: the
    error is recorded with its exit status.
    """
    lines = [line for line in node_lines(text) if line.strip()]
    if status != 0 or len(lines) != 1:
        message = " ".join(line.strip() for line in lines) or "no output"
        return GpuFacts(error=f"nvidia-smi exit {status}: {message}")
    try:
        row = parse_nvidia_smi_csv(lines[0], GPU_QUERY)[0]
    except (ValueError, IndexError):
        return GpuFacts(error=f"unexpected nvidia-smi output: {lines[0]!r}")
    clock, power, busy = row["clocks.sm"], row["power.draw"], row["utilization.gpu"]
    return GpuFacts(
        driver_version=row["driver_version"],
        sm_clock_mhz=_whole(clock),
        power_w=float(power) if power is not None and _is_number(power) else None,
        utilization_pct=_whole(_no_unit(busy)),
        event_reasons=parse_event_reasons(row["clocks_event_reasons.active"]),
    )


def _whole(value: str | None) -> int | None:
    """A finite reading as a whole number; None for [N/A], text, NaN or infinity."""
    if value is None or not _is_number(value) or not math.isfinite(float(value)):
        return None
    return int(float(value))


def _no_unit(value: str | None) -> str | None:
    return None if value is None else value.removesuffix("%").strip()


def parse_event_reasons(value: str | None) -> int | None:
    """NVML's clock-event reasons bitmask as nvidia-smi prints it (`0x0000000000000001`);
    None when not reported or not a bitmask."""
    if value is None or not value.lower().startswith("0x"):
        return None
    try:
        return int(value, 16)
    except ValueError:
        return None


def _is_number(text: str | None) -> bool:
    if text is None:
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def gpu_command(plan: FactPlan) -> str:
    """One nvidia-smi reading of clock, power, load and clock-event reasons; under the plan's
    load probe when it names one (the probe runs in the background, bounded by `timeout`,
    its output discarded, and is stopped once the reading is taken; the section's status is
    nvidia-smi's)."""
    query = cmd("nvidia-smi", "--query-gpu=" + ",".join(GPU_QUERY), "--format=csv,noheader,nounits")
    if not plan.gpu_probe:
        return query
    settle = f"{plan.gpu_probe_seconds:g}"
    bound = f"{plan.gpu_probe_seconds + 30:g}"
    probe = cmd("timeout", bound, *plan.gpu_probe)
    return (
        f"{probe} >/dev/null 2>&1 & p=$!; sleep {settle}; {query}; s=$?; "
        "kill $p 2>/dev/null; wait $p 2>/dev/null; (exit $s)"
    )


def sections(plan: FactPlan) -> list[Read]:
    """The GPU's reading."""
    return [("nvidia-smi", gpu_command(plan))]


#: the loaded NVIDIA modules' versions
module_files = fixed(("nvidia-modules", NVIDIA_MODULE_GLOBS))


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The driver's `NodeFacts` fields (nvidia-smi's failure is the GPU's error)."""
    section = r.sections.get("nvidia-smi")
    gpu = parse_nvidia_smi_query(section.output, section.status) if section else GpuFacts(error="no answer")
    return {"gpu": gpu, "nvidia_modules": r.parse("nvidia-modules", parse_module_attrs, quiet=True) or {}}
