"""The GB10 clock latch, judged from one nvidia-smi reading (clock, power, load, reasons).

The site's notes: a latched GB10 sits at 555-656 MHz and 9-11 W **under load**, nvidia-smi
reports no clock-event reason, and only a full AC disconnect clears it. An idle GB10 also
clocks down (P8, a few watts), legitimately; that is not a latch. So a low clock alone
proves nothing: the reading must show work (utilisation), no reason NVML could name, and
the latch's power band. Pure rules, used by the audit and the launch gate alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sparkbase.facts.model import GpuFacts

#: below this SM clock (MHz) a busy GB10 is not serving at speed
LATCH_CLOCK_MHZ = 1000
#: at or above this utilisation (%) the GPU is doing work (a serving engine under load is
#: far above it; an idle GPU reads 0-3 %)
BUSY_UTILIZATION_PCT = 20
#: the latch's power band (W), from the site's notes
LATCH_POWER_W = (9.0, 11.0)

#: NVML clock-event reason bits (nvml.h `nvmlClocksEventReason*`), as nvidia-smi prints the
#: `clocks_event_reasons.active` bitmask
EVENT_REASONS: dict[int, str] = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clocks setting",
}
GPU_IDLE = 0x1


class ClockState(StrEnum):
    """What one reading says about the GPU's clock."""

    UNKNOWN = "unknown"  # no clock reading
    FULL = "full"  # at or above the latch clock
    IDLE = "idle"  # low because there is no work: not a latch
    THROTTLED = "throttled"  # low for a reason NVML names (power cap, thermal...)
    LATCHED = "latched"  # low under load, no reason, in the latch's power band
    LOW = "low"  # low under load, no reason, outside the latch's power band


@dataclass(frozen=True)
class ClockJudgement:
    """The state and the reading in words (clock, power, load, reasons as known)."""

    state: ClockState
    reading: str


def reason_names(mask: int) -> list[str]:
    """The names of the active clock-event reason bits (unknown bits by value)."""
    names = [name for bit, name in EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(EVENT_REASONS)
    if unknown:
        names.append(f"reason bits {unknown:#x}")
    return names


def describe(gpu: GpuFacts) -> str:
    """`611 MHz, 10.1 W, 97 % busy, no clock-event reason`: the parts nvidia-smi reported."""
    parts = [f"{gpu.sm_clock_mhz} MHz"]
    if gpu.power_w is not None:
        parts.append(f"{gpu.power_w:g} W")
    if gpu.utilization_pct is not None:
        parts.append(f"{gpu.utilization_pct} % busy")
    if gpu.event_reasons is not None:
        names = reason_names(gpu.event_reasons)
        parts.append("reasons: " + ", ".join(names) if names else "no clock-event reason")
    return ", ".join(parts)


def in_latch_band(gpu: GpuFacts) -> bool:
    """Low clock, no reason at all (not even GPU idle) and 9-11 W: the latch's signature
    whatever the load (idle, it is not judged a latch: nothing shows it would not clock up)."""
    low, high = LATCH_POWER_W
    return (
        gpu.sm_clock_mhz is not None
        and gpu.sm_clock_mhz < LATCH_CLOCK_MHZ
        and gpu.event_reasons == 0
        and gpu.power_w is not None
        and low <= gpu.power_w <= high
    )


def judge_clock(gpu: GpuFacts) -> ClockJudgement:
    """Latched only when every part of the latch's signature is in the reading.

    An unknown utilisation (an nvidia-smi that does not report it) is not taken as idle:
    then the power band alone separates the latch (9-11 W) from an idle GPU (a few watts).
    """
    if gpu.sm_clock_mhz is None:
        return ClockJudgement(ClockState.UNKNOWN, gpu.error or "no SM clock reported")
    reading = describe(gpu)
    if gpu.sm_clock_mhz >= LATCH_CLOCK_MHZ:
        return ClockJudgement(ClockState.FULL, reading)
    reasons = gpu.event_reasons or 0
    if reasons & ~GPU_IDLE:
        return ClockJudgement(ClockState.THROTTLED, reading)
    if reasons & GPU_IDLE:
        return ClockJudgement(ClockState.IDLE, reading)
    if gpu.utilization_pct is not None and gpu.utilization_pct < BUSY_UTILIZATION_PCT:
        return ClockJudgement(ClockState.IDLE, reading)
    low, high = LATCH_POWER_W
    if gpu.power_w is not None and low <= gpu.power_w <= high:
        return ClockJudgement(ClockState.LATCHED, reading)
    return ClockJudgement(ClockState.LOW, reading)
