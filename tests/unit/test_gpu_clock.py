"""The clock latch judged from one reading: low clock under load, no reason, 9-11 W.
An idle GB10 clocks down legitimately and is never a latch."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbase.facts.model import GpuFacts
from sparkbase.facts.parsers.driver import parse_event_reasons, parse_nvidia_smi_csv, parse_nvidia_smi_query
from sparkbase.policy.gpu_clock import ClockState, describe, in_latch_band, judge_clock, reason_names

REAL = Path(__file__).parents[1] / "fixtures" / "real"

#: (case, nvidia-smi line as the fact script reads it, expected state)
CASES = [
    ("serving at speed", "580.126.09, 2418, 35.21, 97, 0x0", ClockState.FULL),
    ("idle: P8, few watts, GPU-idle reason", "580.126.09, 208, 4.05, 0, 0x1", ClockState.IDLE),
    ("idle without a reason reported", "580.126.09, 611, 10.12, 0, 0x0", ClockState.IDLE),
    (
        "latched: busy, 611 MHz, 10.12 W, no reason",
        "580.126.09, 611, 10.12, 98, 0x0",
        ClockState.LATCHED,
    ),
    ("latched at the band's edges", "580.126.09, 555, 9, 60, 0x0", ClockState.LATCHED),
    ("latched, 11 W", "580.126.09, 656, 11.0, 60, 0x0", ClockState.LATCHED),
    (
        "busy and low at 30 W: not the latch's band",
        "580.126.09, 700, 30.5, 95, 0x0",
        ClockState.LOW,
    ),
    ("throttled by the power cap", "580.126.09, 800, 10.5, 99, 0x4", ClockState.THROTTLED),
    ("thermal slowdown beside idle", "580.126.09, 800, 10.5, 99, 0x41", ClockState.THROTTLED),
    (
        "load unknown, latch band: latched",
        "580.126.09, 611, 10.12, [N/A], 0x0",
        ClockState.LATCHED,
    ),
    ("load unknown, few watts: low", "580.126.09, 611, 4.0, [N/A], [N/A]", ClockState.LOW),
    ("no clock reading", "580.126.09, [N/A], 10.12, 99, 0x0", ClockState.UNKNOWN),
    ("exactly 1000 MHz", "580.126.09, 1000, 10.0, 99, 0x0", ClockState.FULL),
    ("busy threshold: 19 % is idle", "580.126.09, 611, 10.12, 19, 0x0", ClockState.IDLE),
    ("busy threshold: 20 % is busy", "580.126.09, 611, 10.12, 20, 0x0", ClockState.LATCHED),
]


@pytest.mark.parametrize(("line", "state"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_clock_state(line: str, state: ClockState) -> None:
    assert judge_clock(parse_nvidia_smi_query(line + "\n", 0)).state is state


def test_a_failed_nvidia_smi_is_unknown_with_its_error() -> None:
    judgement = judge_clock(GpuFacts(error="nvidia-smi exit 9: no driver"))
    assert judgement.state is ClockState.UNKNOWN and "exit 9" in judgement.reading


def test_reading_in_words() -> None:
    gpu = parse_nvidia_smi_query("580.126.09, 611, 10.12, 98, 0x0000000000000000\n", 0)
    assert describe(gpu) == "611 MHz, 10.12 W, 98 % busy, no clock-event reason"
    assert parse_event_reasons("0x0000000000000000") == 0
    capped = parse_nvidia_smi_query("580.126.09, 800, 10.5, 99, 0x0000000000001004\n", 0)
    assert describe(capped).endswith("reasons: SW power cap, reason bits 0x1000")


def test_the_real_bitmask_names_every_reason() -> None:
    """nvidia-settings#80: `0x00000000000001FF` is every one of NVML's nine named reasons."""
    text = (
        REAL / "nvidia-smi__query-gpu_clocks_throttle_reasons.supported__csv__GTX1080__nvidia-settings-80.txt"
    )
    row = parse_nvidia_smi_csv(text.read_text(), ["clocks_throttle_reasons.supported"])[0]
    mask = parse_event_reasons(row["clocks_throttle_reasons.supported"])
    assert (
        mask == 0x1FF and len(reason_names(mask)) == 9 and "reason bits" not in " ".join(reason_names(mask))
    )


@pytest.mark.parametrize(
    ("active", "state"),
    [({}, ClockState.IDLE), ({"gpu-busy": True}, ClockState.FULL), ({"gpu-latch": True}, ClockState.LATCHED)],
    ids=["idle", "busy", "latched"],
)
def test_the_lab_answers_the_fact_query_as_each_state(
    active: dict[str, object],
    state: ClockState,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The emulated GB10's answer to the audit's own query is judged as the state it emulates."""
    from sparkbase.facts.parsers.driver import GPU_QUERY
    from sparkbase_lab.shims import cmd_gpu

    monkeypatch.setattr(cmd_gpu, "_utils_version", lambda: "580.95.05")
    monkeypatch.setattr(cmd_gpu, "state", lambda: {"driver": "580.95.05"})
    monkeypatch.setattr(cmd_gpu, "faults", lambda: active)
    assert (
        cmd_gpu.cmd_nvidia_smi(["--query-gpu=" + ",".join(GPU_QUERY), "--format=csv,noheader,nounits"]) == 0
    )
    assert judge_clock(parse_nvidia_smi_query(capsys.readouterr().out, 0)).state is state


def test_an_idle_reading_in_the_latch_band_says_a_probe_would_tell() -> None:
    idle_in_band = parse_nvidia_smi_query("580.126.09, 611, 10.12, 0, 0x0\n", 0)
    assert judge_clock(idle_in_band).state is ClockState.IDLE and in_latch_band(idle_in_band)
    normal_idle = parse_nvidia_smi_query("580.126.09, 562, 4.05, 0, 0x1\n", 0)
    assert not in_latch_band(normal_idle)


FAKE_SMI = """#!/bin/sh
# a stand-in nvidia-smi: says whether the probe was running when it read, exits 7
if [ -e "$PROBE_MARK" ]; then echo "580.95.05, 611, 10.12, 98, 0x0"
else echo "580.95.05, 562, 4.05, 0, 0x1"; fi
exit 7
"""


def test_the_reading_is_taken_under_the_lanes_probe(tmp_path: Path) -> None:
    """The probe runs in the background while nvidia-smi reads, is stopped after, adds no
    output, and the section's status is nvidia-smi's."""
    import os
    import subprocess
    import time

    from sparkbase.facts.parsers.driver import gpu_command
    from sparkbase.facts.script import FactPlan

    (tmp_path / "nvidia-smi").write_text(FAKE_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    mark = tmp_path / "probe-running"
    probe = ("sh", "-c", f'touch {mark}; trap "rm -f {mark}; exit 0" TERM; while :; do sleep 0.1; done')
    plan = FactPlan(gpu_probe=probe, gpu_probe_seconds=0.5)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PROBE_MARK": str(mark)}
    started = time.monotonic()
    done = subprocess.run(
        ["sh", "-c", gpu_command(plan)], capture_output=True, text=True, env=env, timeout=20
    )
    assert done.returncode == 7 and done.stdout == "580.95.05, 611, 10.12, 98, 0x0\n", done
    assert time.monotonic() - started < 10 and not mark.exists()  # stopped right after the reading
    assert gpu_command(FactPlan()).startswith("nvidia-smi --query-gpu=driver_version,clocks.sm,")
