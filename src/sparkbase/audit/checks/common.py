"""What the check modules share: fix texts, the unknown-fact outcome."""

from __future__ import annotations

from sparkbase.audit.registry import Outcome, Subject, fail, ok
from sparkbase.facts.model import ModuleInfo, NodeFacts
from sparkbase.facts.signing import SignatureProblem, judge_signature
from sparkbase.policy.mok import console_text, pending_signer

LATCH_FIX = "full AC disconnect (unplug power), then re-run"
THROTTLE_FIX = "remove the named cause (power cap, cooling), then re-run"
LOW_CLOCK_FIX = "low clock under load with no reason: check the node's power supply, then re-run"
APPLY_FIX = "sparkbase apply --limit {node}"
REBOOT_FIX = "sparkbase apply --limit {node} --allow-reboot"
#: the kernel argument that pins NVMe APST off (`host.nvme.apst: disabled`)
APST_ARG = "nvme_core.default_ps_max_latency_us=0"


def apply_fix(subject: Subject, reboot: bool = False) -> str:
    """The apply command that fixes this node (with `--allow-reboot` when it needs one)."""
    return (REBOOT_FIX if reboot else APPLY_FIX).format(node=subject.node)


def linked(facts: NodeFacts, path: str, want: str) -> Outcome | None:
    """A failure when `path`, a file sparkbase writes, is a symbolic link on the node (apply
    refuses to write through it, and the audit never judges or shows what it points to)."""
    target = facts.links.get(path)
    if target is None:
        return None
    return fail(want, f"a symbolic link to {target!r}, not a file (never read through)",
                "move the link away (sparkbase writes only regular files, never through a link), "
                "then apply")


def unknown(facts: NodeFacts, section: str, what: object) -> Outcome:
    """A fact the node could not report: fail, saying why."""
    reason = facts.errors.get(section, "not reported")
    return fail(what, f"unknown ({reason})", "check the node by hand; the fact could not be read")


def matches(facts: NodeFacts, section: str, want: object, seen: object, fix: str) -> Outcome:
    """`seen`, a value the node reported in fact `section`, equals `want`; unknown when the
    node could not report it; else a failure with `fix`."""
    if seen is None:
        return unknown(facts, section, want)
    if seen != want:
        return fail(want, seen, fix)
    return ok(want, seen)


def dkms_installed(subject: Subject, facts: NodeFacts, dkms_name: str, version: str) -> Outcome:
    """DKMS has `dkms_name/version` installed for the running kernel, with no warning beside
    the state (`dkms status` noise is reported beside, never fatal)."""
    release = facts.kernel_release
    want = f"{dkms_name}/{version} installed for {release}"
    entries = [e for e in facts.dkms if e.name == dkms_name and e.version == version and e.kernel == release]
    noise = f" (dkms also said: {'; '.join(facts.dkms_noise)})" if facts.dkms_noise else ""
    if any(entry.installed for entry in entries):
        return ok(want, "installed" + noise)
    warned = [entry for entry in entries if entry.status == "installed" and entry.warnings]
    if warned:
        # DKMS's own check: the module in /lib/modules is not the one it built (another
        # package or a hand copy replaced it), so what loads is not the DKMS build
        seen = f"{dkms_name}/{version} {release} {warned[0].shown}: not the module DKMS built"
        return fail(want, seen + noise,
                    f"put DKMS's build back: dkms install --force {dkms_name}/{version} -k {release}")
    seen = ", ".join(f"{e.name}/{e.version} {e.kernel or ''} {e.shown}" for e in facts.dkms)
    return fail(want, (seen or "not installed") + noise,
                f"dkms install {dkms_name}/{version} -k {release}: {apply_fix(subject)}")


def module_signed(subject: Subject, facts: NodeFacts, info: ModuleInfo | None, key: str | None) -> Outcome:
    """The module file `modinfo` read is signed by the pinned MOK `key` (else, with no key
    pinned, by an enrolled one)."""
    want = f"signed with MOK {key}" if key else "signed with an enrolled MOK"
    verdict = judge_signature(info, facts.mok_certificates, key)
    if verdict.ok:
        return ok(want, verdict.detail)
    pending = mok_pending(facts, info, key)
    if pending is not None:
        return pending(want, f"{verdict.detail}; MOK enrolment pending")
    if verdict.problem is SignatureProblem.UNSIGNED:
        return fail(want, "unsigned", "rebuild with the MOK key present: " + apply_fix(subject))
    return fail(want, verdict.detail, "re-sign with the enrolled MOK key: " + apply_fix(subject))


def module_flag(value: str | None) -> bool | None:
    """A module parameter as the kernel prints it (`Y`/`N`/`1`/`0`)."""
    if value is None:
        return None
    return value.strip().upper() in {"Y", "1", "ON", "TRUE"}


class _PendingOutcome:
    """The outcome of a check whose module waits for a MOK enrolment at the console."""

    def __init__(self, fingerprint: str) -> None:
        self.fingerprint = fingerprint

    def __call__(self, want: str, seen: str) -> Outcome:
        return fail(want, f"{seen} (MOK {self.fingerprint} is imported, not yet enrolled: the module "
                    "is not expected to load until a person at the console enrols it)",
                    f"MOK enrolment pending: at the console, {console_text()}")


def mok_pending(facts: NodeFacts, info: ModuleInfo | None, key: str | None) -> _PendingOutcome | None:
    """When the key that signs the module (`key` pinned, else the module's signer) is
    imported and not yet enrolled: how a check reports it (the console steps, not a generic
    failure); None otherwise."""
    pending = pending_signer(info, facts.mok_certificates, facts.mok_pending, key)
    return _PendingOutcome(pending.fingerprint) if pending is not None else None
