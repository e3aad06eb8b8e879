"""Re-open triggers with evidence: the site's written conditions for looking at a rejected
decision again, evaluated against the site contract, the live fleet and Prometheus scrapes
(read and parsed by `sparkbase.gate.metrics`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkbase.gate.metrics import Sample

if TYPE_CHECKING:
    from sparkbase.model.site import Site
    from sparkbase.model.site_rules import KernelPinTrigger, SessionLoadTrigger

FIRED = "fired"
QUIET = "quiet"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class TriggerVerdict:
    """Whether a trigger fired, why (evidence), and what it re-opens."""

    id: str
    kind: str
    status: str  # fired | quiet | unknown
    description: str
    reopens: str
    evidence: list[str] = field(default_factory=list)

    @property
    def fired(self) -> bool:
        """The trigger's condition holds."""
        return self.status == FIRED


def evaluate_session_load(trigger: SessionLoadTrigger, samples: list[Sample]) -> TriggerVerdict:
    """Fires when more than `more_than` long sessions ran at once in ≥ `sustained_fraction` of
    the sample times within the window ending at the latest sample."""
    base = {
        "id": trigger.id,
        "kind": trigger.kind,
        "description": trigger.description,
        "reopens": trigger.reopens,
    }
    relevant = [s for s in samples if s.metric == trigger.metric]
    if not relevant:
        return TriggerVerdict(
            status=UNKNOWN, evidence=[f"no {trigger.metric} samples in the metrics"], **base
        )
    latest = max(s.time for s in relevant)
    start = latest - trigger.window_minutes * 60
    times = sorted({s.time for s in relevant if s.time >= start})
    counts = {
        t: sum(1 for s in relevant if s.time == t and s.value >= trigger.min_context_tokens) for t in times
    }
    over = [t for t in times if counts[t] > trigger.more_than]
    fraction = len(over) / len(times)
    fired = fraction >= trigger.sustained_fraction
    evidence = [
        f"{len(times)} sample time(s) in the {trigger.window_minutes}-minute window; "
        f"{len(over)} with more than {trigger.more_than} sessions of ≥{trigger.min_context_tokens} tokens "
        f"({fraction:.0%}; fires at ≥{trigger.sustained_fraction:.0%})",
        f"peak concurrency {max(counts.values())}, median {sorted(counts.values())[len(counts) // 2]}",
    ]
    return TriggerVerdict(status=FIRED if fired else QUIET, evidence=evidence, **base)


def evaluate_kernel_pin(
    trigger: KernelPinTrigger, site: Site, live: Mapping[str, tuple[str | None, int | None]] | None = None
) -> TriggerVerdict:
    """Fires when the site contract's kernel line and page size are the trigger's."""
    contract = site.rules.contract
    line_matches = (contract.kernel_line + ".").startswith(trigger.kernel_line_prefix)
    fired = line_matches and contract.page_size == trigger.page_size
    evidence = [
        f"site contract: kernel line {contract.kernel_line}, page size {contract.page_size} "
        f"(trigger: {trigger.kernel_line_prefix}x with {trigger.page_size})"
    ]
    if live is not None:
        for node, (release, page) in sorted(live.items()):
            evidence.append(f"{node}: running {release or 'unknown'}, page size {page or 'unknown'}")
    return TriggerVerdict(
        id=trigger.id,
        kind=trigger.kind,
        status=FIRED if fired else QUIET,
        description=trigger.description,
        reopens=trigger.reopens,
        evidence=evidence,
    )


def evaluate(
    site: Site,
    samples: list[Sample] | None,
    live: Mapping[str, tuple[str | None, int | None]] | None = None,
) -> list[TriggerVerdict]:
    """Every trigger of the site (pure, given the evidence)."""
    verdicts: list[TriggerVerdict] = []
    for trigger in site.rules.triggers:
        if trigger.kind == "kernel-pin":
            verdicts.append(evaluate_kernel_pin(trigger, site, live))
        elif samples is None:
            verdicts.append(
                TriggerVerdict(
                    trigger.id,
                    trigger.kind,
                    UNKNOWN,
                    trigger.description,
                    trigger.reopens,
                    ["no metrics given (--metrics URL_OR_FILE)"],
                )
            )
        else:
            verdicts.append(evaluate_session_load(trigger, samples))
    return verdicts


def now() -> float:
    """The current Unix time (the scrape time of an untimestamped URL scrape)."""
    return time.time()
