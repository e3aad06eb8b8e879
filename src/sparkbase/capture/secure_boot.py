"""The secure_boot section from a live node: Secure Boot's state and the enrolled MOK."""

from __future__ import annotations

from sparkbase.capture.core import Collector
from sparkbase.facts.model import NodeFacts, SecureBoot
from sparkbase.model.baseline import Baseline


def capture(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """Secure Boot's state and the MOK fingerprint."""
    sb = facts.secure_boot
    out.put(("secure_boot", "enabled"), None if sb is None else sb is SecureBoot.ENABLED,
            "mokutil --sb-state gave no answer")
    _mok(facts, baseline, out)


def _mok(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """The enrolled MOK the baseline pins, else the node's one enrolled MOK; only for a
    baseline that pins one or signs a DKMS module (else it pins no key, and still pins none)."""
    enrolled = facts.mok_fingerprints
    pinned = baseline.secure_boot.mok_fingerprint
    saver = baseline.memory.memory_saver
    if pinned is None and (saver is None or not saver.required):
        return
    if pinned is not None and pinned in enrolled:
        out.put(("secure_boot", "mok_fingerprint"), pinned, "")
    elif len(enrolled) == 1:
        out.put(("secure_boot", "mok_fingerprint"), enrolled[0], "")
    elif pinned is not None or enrolled:
        out.missing.append(
            f"secure_boot.mok_fingerprint: {len(enrolled)} MOK(s) enrolled, none the pinned one")
