"""Driver and GPU checks: the driver version and the clock latch."""

from __future__ import annotations

from sparkbase.audit.checks.common import LATCH_FIX, LOW_CLOCK_FIX, THROTTLE_FIX, apply_fix
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.policy.gpu_clock import LATCH_CLOCK_MHZ, ClockState, in_latch_band, judge_clock


@node_check("driver.version", "driver", "nvidia-smi reports the baseline's driver",
            section="driver")
def driver_version(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    want = expected.baseline.driver.version
    if facts.gpu.error is not None:
        return fail(
            want, facts.gpu.error, f"install the driver for the running kernel: {apply_fix(at, True)}"
        )
    if facts.gpu.driver_version != want:
        return fail(want, facts.gpu.driver_version, f"install driver {want}: {apply_fix(at, True)}")
    return ok(want, facts.gpu.driver_version)


@node_check("gpu.clock", "gpu", "the GPU is not clock-latched (under load: SM clock at least 1000 MHz)",
            section=None)
def gpu_clock(_expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    want = f">= {LATCH_CLOCK_MHZ} MHz"
    judgement = judge_clock(facts.gpu)
    state, observed = judgement.state, judgement.reading
    if state is ClockState.UNKNOWN:
        return skip(f"no SM clock reading ({observed})")
    if state is ClockState.LATCHED:
        return fail(want, observed + " (clock latch)", LATCH_FIX)
    if state is ClockState.THROTTLED:
        return fail(want, observed + " (throttled, not the latch)", THROTTLE_FIX)
    if state is ClockState.LOW:
        return fail(want, observed + " (low under load, outside the latch's 9-11 W)", LOW_CLOCK_FIX)
    if state is ClockState.IDLE:
        if in_latch_band(facts.gpu):
            return ok(want, observed + " (idle: not judged; in the latch's 9-11 W with no reason, "
                      "a load probe at launch would tell)")
        return ok(want, observed + " (idle: not a latch)")
    return ok(want, observed)
