"""What the check modules share: fix texts, the unknown-fact outcome."""

from __future__ import annotations

from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, fail
from sparkbase.facts.model import NodeFacts

LATCH_FIX = "full AC disconnect (unplug power), then re-run"
THROTTLE_FIX = "remove the named cause (power cap, cooling), then re-run"
LOW_CLOCK_FIX = "low clock under load with no reason: check the node's power supply, then re-run"
APPLY_FIX = "sparkbase apply --limit {node}"
REBOOT_FIX = "sparkbase apply --limit {node} --allow-reboot"
#: the kernel argument that pins NVMe APST off (`host.nvme.apst: disabled`)
APST_ARG = "nvme_core.default_ps_max_latency_us=0"


def apply_fix(expected: Expected, reboot: bool = False) -> str:
    """The apply command that fixes this node (with `--allow-reboot` when it needs one)."""
    return (REBOOT_FIX if reboot else APPLY_FIX).format(node=expected.node)


def unknown(facts: NodeFacts, section: str, what: object) -> Outcome:
    """A fact the node could not report: fail, saying why."""
    reason = facts.errors.get(section, "not reported")
    return fail(what, f"unknown ({reason})", "check the node by hand; the fact could not be read")


def module_flag(value: str | None) -> bool | None:
    """A module parameter as the kernel prints it (`Y`/`N`/`1`/`0`)."""
    if value is None:
        return None
    return value.strip().upper() in {"Y", "1", "ON", "TRUE"}
