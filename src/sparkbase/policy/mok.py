"""MOK enrolment pending: the key is imported, a person at the console has not enrolled it.

`mokutil --import` only queues a certificate (`mokutil --list-new`); shim's MokManager
enrols it at the next boot, and only when a person at the console confirms it (shim's
MokManager.c `mok_enrollment_prompt`: the `[Enroll MOK]` key list, then "Enroll the
key(s)?", then the password, then the reboot). Until then the kernel refuses every module
signed by that key, so the modules are not expected to load: apply and the audit report
this state with the steps below, never as a generic failure. Pure: used by `deploy/` and
`audit/`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkbase.facts.model import ModuleInfo, MokCertificate
from sparkbase.facts.signing import signed_by

#: what the person at the node's console does at the next boot (MokManager's screens; the
#: password is the node's root password: sparkbase imports with `mokutil --import --root-pw`)
CONSOLE_STEPS: tuple[str, ...] = (
    "reboot the node with a person at its console",
    "on the blue MokManager screen (Perform MOK management: press a key within 10 s) choose Enroll MOK",
    "Continue",
    "Yes (Enroll the key(s)?)",
    "the password: the node's root password (imported with mokutil --import --root-pw)",
    "Reboot",
)


def console_text() -> str:
    """The console steps as one line a person follows."""
    return " → ".join(CONSOLE_STEPS)


@dataclass(frozen=True)
class PendingEnrolment:
    """A MOK the node signs with that is imported and not yet enrolled."""

    fingerprint: str

    def summary(self) -> str:
        """What a report says of it."""
        return f"MOK enrolment pending ({self.fingerprint}): at the console, {console_text()}"

    def to_json(self) -> dict[str, object]:
        """The state as JSON (apply's `mok_enrolment`)."""
        return {"state": "pending", "fingerprint": self.fingerprint, "console_steps": list(CONSOLE_STEPS)}


def pending_enrolment(signing: str | None, enrolled: tuple[str, ...] | list[str],
                      pending: tuple[str, ...] | list[str]) -> PendingEnrolment | None:
    """The enrolment of the key the node signs with (`signing`, a SHA-1 fingerprint), when
    it is imported (`mokutil --list-new`) and not enrolled; None otherwise."""
    if signing is None:
        return None
    key = signing.lower()
    if key in {fp.lower() for fp in enrolled} or key not in {fp.lower() for fp in pending}:
        return None
    return PendingEnrolment(key)


def pending_signer(info: ModuleInfo | None, enrolled: tuple[MokCertificate, ...],
                   pending: tuple[MokCertificate, ...], fingerprint: str | None) -> PendingEnrolment | None:
    """The pending enrolment that keeps a module from loading: the pinned key (`fingerprint`)
    when it is pending, else the pending certificate that signed the module."""
    enrolled_keys = tuple(cert.fingerprint for cert in enrolled)
    if fingerprint is not None:
        return pending_enrolment(fingerprint, enrolled_keys, tuple(cert.fingerprint for cert in pending))
    if info is None or info.error or not info.sig_key:
        return None
    cert = next((cert for cert in pending if signed_by(info, cert)), None)
    if cert is None or cert.fingerprint in enrolled_keys:
        return None
    return PendingEnrolment(cert.fingerprint)
