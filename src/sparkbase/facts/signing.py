"""Which enrolled certificate signed a module, as kmod reports the signature.

kmod's `modinfo` names the signer by its certificate's serial number (`sig_key`) and
issuer CN (`signer`); a baseline pins the MOK by its SHA-1 fingerprint, which
`mokutil --list-enrolled` prints next to that serial. One pure judgement, used by the
audit (`memory_saver.signature`) and by the deploy's decision to re-sign a module.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sparkbase.facts.model import ModuleInfo, MokCertificate
from sparkbase.facts.parsers.secure_boot import normalise_serial


class SignatureProblem(StrEnum):
    """Why a module's signature is not the wanted one."""

    NO_MODINFO = "no modinfo"  # the module file is missing, or modinfo failed
    UNSIGNED = "unsigned"
    KEY_NOT_ENROLLED = "key not enrolled"  # the wanted (or the signing) key is not enrolled
    OTHER_KEY = "signed by another key"


@dataclass(frozen=True)
class SignatureVerdict:
    """Whether a module is signed by the wanted key, and in words what was found."""

    problem: SignatureProblem | None  # None: signed by the wanted, enrolled key
    detail: str
    certificate: MokCertificate | None = None  # the enrolled certificate that signed it

    @property
    def ok(self) -> bool:
        """Signed by the wanted, enrolled key."""
        return self.problem is None


def signed_by(info: ModuleInfo, cert: MokCertificate) -> bool:
    """The module's signature names `cert`: same serial, and same issuer CN when both tell."""
    if not info.sig_key or not cert.serial:
        return False
    try:
        same_serial = normalise_serial(info.sig_key) == cert.serial
    except ValueError:
        return False
    if not same_serial:
        return False
    return info.signer is None or cert.issuer_cn is None or info.signer == cert.issuer_cn


def judge_signature(info: ModuleInfo | None, enrolled: tuple[MokCertificate, ...],
                    fingerprint: str | None) -> SignatureVerdict:
    """Is the module signed by the MOK the baseline pins (`fingerprint`), enrolled?

    Without a pinned fingerprint (a site still to confirm its key, the lab's generated
    key), any enrolled certificate that signed it counts.
    """
    if info is None or info.error:
        detail = info.error if info is not None and info.error else "no modinfo"
        return SignatureVerdict(SignatureProblem.NO_MODINFO, detail)
    if not info.sig_key:
        return SignatureVerdict(SignatureProblem.UNSIGNED, "unsigned")
    signer = f"serial {info.sig_key}" + (f", signer {info.signer!r}" if info.signer else "")
    if fingerprint is not None:
        wanted = next((c for c in enrolled if c.fingerprint == fingerprint.lower()), None)
        if wanted is None:
            return SignatureVerdict(SignatureProblem.KEY_NOT_ENROLLED,
                                    f"signed by {signer}; MOK {fingerprint} is not enrolled")
        if wanted.serial is None:
            return SignatureVerdict(SignatureProblem.OTHER_KEY, f"signed by {signer}; mokutil shows no "
                                                                f"serial for MOK {fingerprint}")
        if signed_by(info, wanted):
            return SignatureVerdict(None, f"signed by {signer} (MOK {fingerprint})", wanted)
        return SignatureVerdict(SignatureProblem.OTHER_KEY, f"signed by {signer}, not by MOK {fingerprint} "
                                f"(serial {wanted.serial}, issuer {wanted.issuer_cn!r})")
    found = next((c for c in enrolled if signed_by(info, c)), None)
    if found is None:
        return SignatureVerdict(SignatureProblem.KEY_NOT_ENROLLED,
                                f"signed by {signer}, which is no enrolled MOK")
    return SignatureVerdict(None, f"signed by {signer} (enrolled MOK {found.fingerprint})", found)
