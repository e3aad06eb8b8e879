"""The GPU: `nvidia-smi --query-gpu=… --format=csv` answers."""

from __future__ import annotations

from collections.abc import Sequence

from sparkbase.facts.model import GpuFacts

#: what nvidia-smi prints for a field the GPU does not report (GB10: memory.*)
NOT_AVAILABLE = {"[N/A]", "N/A", "[Not Supported]", "Not Supported"}
#: the query the fact script runs (`--format=csv,noheader,nounits`)
GPU_QUERY = ("driver_version", "clocks.sm", "power.draw")


def parse_nvidia_smi_csv(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """`nvidia-smi --query-gpu=F1,F2… --format=csv[,noheader]` → one dict per GPU.

    A header line (`name, driver_version [MHz], …`) is skipped; `[N/A]` is None.
    """
    rows: list[dict[str, str | None]] = []
    for line in text.splitlines():
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
    """`nvidia-smi --query-gpu=driver_version,clocks.sm,power.draw --format=csv,noheader,nounits`.

    A failing nvidia-smi (no driver, library mismatch, latched NVML) is a fact too: the
    error is recorded with its exit status.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if status != 0 or len(lines) != 1:
        message = " ".join(line.strip() for line in lines) or "no output"
        return GpuFacts(error=f"nvidia-smi exit {status}: {message}")
    try:
        row = parse_nvidia_smi_csv(lines[0], GPU_QUERY)[0]
    except (ValueError, IndexError):
        return GpuFacts(error=f"unexpected nvidia-smi output: {lines[0]!r}")
    clock, power = row["clocks.sm"], row["power.draw"]
    return GpuFacts(
        driver_version=row["driver_version"],
        sm_clock_mhz=int(float(clock)) if clock is not None and _is_number(clock) else None,
        power_w=float(power) if power is not None and _is_number(power) else None,
    )


def _is_number(text: str | None) -> bool:
    if text is None:
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True
