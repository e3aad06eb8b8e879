"""The cpuset check (section `cpuset`): the serving slice pinned to the fast cores."""

from __future__ import annotations

from sparkbase.audit.checks.common import apply_fix, unknown
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.cpuset import format_cpu_list


@node_check("cpuset.slice", "cpuset", "the serving slice is pinned to the fast cores", section="cpuset")
def cpuset_slice(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    cpuset = expected.baseline.cpuset
    if cpuset.pinned_by != "slice":
        return skip("lanes are pinned by their containers' --cpuset-cpus (cpuset.pinned_by: container): "
                    "runtime.affinity judges each lane process's CPUs")
    cpus = frozenset(cpuset.cpus)
    want = f"{cpuset.slice} AllowedCPUs={cpuset.cpulist()}"
    seen = facts.slice_allowed_cpus
    if seen is None and "units" in facts.errors:
        return unknown(facts, "units", want)
    if seen != cpus:
        shown = format_cpu_list(seen) if seen else "(unset)"
        return fail(want, f"AllowedCPUs={shown}", f"write the slice: {apply_fix(at)}")
    if facts.fast_cpus and not cpus <= set(facts.fast_cpus):
        slow = sorted(cpus - set(facts.fast_cpus))
        return fail(want, f"CPUs {slow} are not Cortex-X925 (CPU part 0xd85) here", "fix cpuset.cpus")
    return ok(want, f"AllowedCPUs={format_cpu_list(seen)}")
