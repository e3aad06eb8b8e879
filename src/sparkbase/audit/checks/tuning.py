"""DGX OS tuning units a baseline drives: the CPU governor (nv-cpu-governor.service) and
NVMe interrupt coalescing (nvidia-nvme-interrupt-coalescing.service, feature 0x08).

Both are warnings, as the recipe's doctor grades them (spark-ds41f docs/doctor.md,
0161d716: "`cpupower` for the 64 KiB kernel and the `performance` CPU governor" and "NVMe
interrupt coalescing off" are warn); that the nodes agree on a governor stays an error
(`fleet.governor`).
"""

from __future__ import annotations

from sparkbase.audit.checks.common import apply_fix, unknown
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts, UnitState
from sparkbase.facts.parsers import format_cpu_list
from sparkbase.model.dgxos import (
    GOVERNOR_UNIT,
    NVME_COALESCING_SCRIPT,
    NVME_COALESCING_UNIT,
    coalescing_value,
)


def governors_seen(governors: dict[int, str]) -> str:
    """`performance on CPUs 0-19` (one group per governor, most CPUs first)."""
    by_governor: dict[str, set[int]] = {}
    for cpu, governor in governors.items():
        by_governor.setdefault(governor, set()).add(cpu)
    groups = sorted(by_governor.items(), key=lambda item: (-len(item[1]), item[0]))
    return "; ".join(f"{governor} on CPUs {format_cpu_list(frozenset(cpus))}" for governor, cpus in groups)


def _unit_seen(state: UnitState | None) -> str:
    if state is None or not state.unit_file_state:
        return "not installed"
    return f"{state.unit_file_state}, {state.active_state or 'inactive'}"


@node_check("host.governor", "host", "every CPU runs the baseline's frequency governor", severity="warn",
            section="host")
def host_governor(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    want = expected.baseline.host.cpu_governor
    if want is None:
        return skip("the baseline does not manage the CPU governor")
    wanted = f"{want} on every CPU"
    if not facts.governors:
        return unknown(facts, "governors", wanted)
    seen = governors_seen(facts.governors)
    if any(governor != want for governor in facts.governors.values()):
        unit = facts.units.get(GOVERNOR_UNIT)
        if unit is not None and unit.active_state == "failed":
            fix = (f"{GOVERNOR_UNIT} failed: cpupower needs linux-tools-{facts.kernel_release}; "
                   + apply_fix(at))
        else:
            fix = f"systemctl restart {GOVERNOR_UNIT}: {apply_fix(at)}"
        return fail(wanted, seen, fix)
    return ok(wanted, seen)


@node_check("host.governor_unit", "host", "DGX OS's governor unit is enabled and did not fail",
            severity="warn", section="host")
def host_governor_unit(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    if expected.baseline.host.cpu_governor is None:
        return skip("the baseline does not manage the CPU governor")
    want = f"{GOVERNOR_UNIT} enabled, not failed"
    state = facts.units.get(GOVERNOR_UNIT)
    if state is None:
        return unknown(facts, "units", want)
    seen = _unit_seen(state)
    if state.active_state == "failed":
        return fail(want, seen, f"cpupower failed: install linux-tools-{facts.kernel_release} (kernel.tools),"
                                f" then systemctl restart {GOVERNOR_UNIT}: {apply_fix(at)}")
    if not state.enabled:
        return fail(want, seen, f"systemctl enable {GOVERNOR_UNIT} (sparkbase does not re-enable a "
                                "vendor unit someone turned off: do it by hand)")
    return ok(want, seen)


def coalescing_wanted(on: bool) -> str:
    """What the check expects, in words."""
    if on:
        return f"feature 0x08 = 0x107 (coalescing on), {NVME_COALESCING_UNIT} enabled"
    return f"feature 0x08 = 0 (coalescing off), {NVME_COALESCING_UNIT} masked"


@node_check("host.nvme_coalescing", "host", "NVMe interrupt coalescing is as the baseline says",
            severity="warn", section="host")
def host_nvme_coalescing(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    on = expected.baseline.host.nvme.interrupt_coalescing
    want = coalescing_wanted(on)
    if facts.nvme_coalescing is None:
        return unknown(facts, "nvme-coalescing", want)
    state = facts.units.get(NVME_COALESCING_UNIT)
    value = facts.nvme_coalescing
    seen = f"feature 0x08 = {value:#x}, {NVME_COALESCING_UNIT} {_unit_seen(state)}"
    file_state = state.unit_file_state if state is not None else ""
    if on:
        if value != coalescing_value(True) or state is None or not state.enabled:
            return fail(want, seen, f"unmask, enable and start {NVME_COALESCING_UNIT}: {apply_fix(at)}")
        return ok(want, seen)
    # off: the unit must not be able to turn it back on at boot (absent counts as masked)
    if value != coalescing_value(False) or file_state not in ("", "masked"):
        return fail(want, seen, f"systemctl mask --now {NVME_COALESCING_UNIT}; "
                                f"{NVME_COALESCING_SCRIPT} disable: {apply_fix(at)}")
    return ok(want, seen)
