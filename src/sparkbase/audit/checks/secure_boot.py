"""Secure Boot checks: the state and the enrolled MOK key."""

from __future__ import annotations

from sparkbase.audit.checks.common import apply_fix, unknown
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts, SecureBoot
from sparkbase.facts.signing import judge_signature
from sparkbase.policy.mok import console_text, pending_enrolment, pending_signer


@node_check("secure_boot.state", "secure_boot", "Secure Boot is in the baseline's state",
            section="secure_boot")
def secure_boot_state(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    return secure_boot_outcome(expected.baseline.secure_boot.enabled, facts)


def secure_boot_outcome(enabled: bool, facts: NodeFacts) -> Outcome:
    """Secure Boot enforcing on the node when `enabled`, else not enforcing."""
    want = SecureBoot.ENABLED.value if enabled else "not enforcing"
    state = facts.secure_boot
    if state is None:
        return unknown(facts, "sb-state", want)
    firmware = "change it in the firmware setup (a person at the console)"
    if not enabled:
        if state.enforcing:
            return fail(want, state.value, firmware)
        return ok(want, state.value)
    if state is SecureBoot.NOT_ENFORCING:
        return fail(want, state.value + " (module signatures are not checked)",
                    "re-enable shim validation: mokutil --enable-validation, then reboot and "
                    "confirm at the console")
    if state is SecureBoot.NO_SECURE_BOOT:
        return fail(want, "off: the firmware has no Secure Boot (mokutil: This system doesn't support "
                    "Secure Boot)",
                    "this node cannot enforce module signatures: serve it from a baseline without "
                    "Secure Boot, or update its firmware to one that has it")
    if state is not SecureBoot.ENABLED:
        return fail(want, state.value, firmware)
    return ok(want, state.value)


def _mok_items(expected: Expected) -> list[str]:
    secure = expected.baseline.secure_boot
    signs = secure.enabled and bool(expected.baseline.dkms_builds())
    return ["mok"] if secure.mok_fingerprint or signs else []


@node_check("secure_boot", "secure_boot", "the MOK key the baseline signs with is enrolled", items=_mok_items,
            section="secure_boot")
def secure_boot_mok(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    key = expected.baseline.secure_boot.mok_fingerprint
    enroll = "mokutil --import the MOK certificate, then reboot and accept it: " + apply_fix(at, True)
    enrolled = ", ".join(facts.mok_fingerprints) or "no key enrolled"
    if key is not None:
        if key in facts.mok_fingerprints:
            return ok(key, key)
        if pending_enrolment(key, facts.mok_fingerprints, [c.fingerprint for c in facts.mok_pending]):
            seen = f"MOK enrolment pending: {key} imported, not yet enrolled (enrolled: {enrolled})"
            return fail(key, seen, f"at the console, {console_text()}")
        return fail(key, enrolled, enroll)
    # no pinned key (a site still to confirm its own): the key that signed the module
    modules = (("memory-saver", facts.memory_saver), ("fan-control", facts.fan_control))
    signed = [(what, info) for what, info in modules if info is not None and not info.error and info.sig_key]
    if not signed:
        return skip("no MOK is pinned and no signed module names one (see memory_saver.signature)")
    what, info = signed[0]
    want = f"the key that signed the {what} module"
    verdict = judge_signature(info, facts.mok_certificates, None)
    if verdict.ok and verdict.certificate is not None:
        return ok(want, f"MOK {verdict.certificate.fingerprint} enrolled")
    pending = pending_signer(info, facts.mok_certificates, facts.mok_pending, None)
    if pending is not None:
        return fail(want, f"MOK enrolment pending: {pending.fingerprint} imported, not yet enrolled "
                    f"(enrolled: {enrolled})", f"at the console, {console_text()}")
    return fail(want, f"{verdict.detail}; enrolled: {enrolled}", enroll)
