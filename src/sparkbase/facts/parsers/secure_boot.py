"""Secure Boot and MOK keys: `mokutil --sb-state`, `mokutil --list-enrolled`/`--list-new`."""

from __future__ import annotations

import re
from contextlib import suppress
from typing import Any

from sparkbase.facts.model import MokCertificate, SecureBoot
from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.script import FactPlan, Read, Reader, cmd, fixed

_FINGERPRINT = re.compile(r"^SHA1 Fingerprint:\s*(?P<fp>[0-9A-Fa-f:]+)\s*$")
_SERIAL_INLINE = re.compile(r"^Serial Number:\s*(?P<dec>\d+)\s*\(0x(?P<hex>[0-9A-Fa-f]+)\)")
_HEX_LINE = re.compile(r"^[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2})*:?$")
#: `CN=x` as X509_print writes names (`C=GB, …, CN=x`), or `CN = x` (openssl ≥ 1.1 CLI)
_CN = re.compile(r"(?:^|[,/])\s*CN\s*=\s*(?P<cn>[^,/]+)")


def parse_sb_state(text: str) -> SecureBoot:
    """`mokutil --sb-state` → the Secure Boot state (every state mokutil prints).

    `SecureBoot enabled` followed by `SecureBoot validation is disabled in shim` is a
    node that does not enforce signatures (mokutil --disable-validation). Before the
    command, mokutil checks that the firmware has EFI variables (`EFI variables are not
    supported on this system`) and that it has Secure Boot at all (`This system doesn't
    support Secure Boot`, printed for `--sb-state` too: tests/fixtures/real/): both are
    states, Secure Boot off, not unreadable answers.
    """
    lowered = text.lower()
    if "efi variables are not supported" in lowered:
        return SecureBoot.UNSUPPORTED
    if "doesn't support secure boot" in lowered or "does not support secure boot" in lowered:
        return SecureBoot.NO_SECURE_BOOT
    if "secureboot enabled" in lowered:
        if "validation is disabled" in lowered:
            return SecureBoot.NOT_ENFORCING
        return SecureBoot.ENABLED
    if "secureboot disabled" in lowered:
        return SecureBoot.SETUP_MODE if "setup mode" in lowered else SecureBoot.DISABLED
    raise ValueError(f"cannot read the Secure Boot state from {text!r}")


def normalise_serial(text: str) -> str:
    """A certificate serial in any printed form (`40:8B:…`, `408b…`, `0x0408b`) → lower-case
    hex without colons or leading zeros, so kmod's `sig_key` and mokutil's serial compare."""
    digits = text.strip().lower().removeprefix("0x").replace(":", "").replace(" ", "")
    if not digits or any(char not in "0123456789abcdef" for char in digits):
        raise ValueError(f"not a hex serial number: {text!r}")
    return digits.lstrip("0") or "0"


def _cn(name: str) -> str | None:
    found = _CN.search(name.strip())
    return found["cn"].strip() if found else None


def parse_mok_certificates(text: str) -> tuple[MokCertificate, ...]:
    """`mokutil --list-enrolled` (or `--list-new`) → each key's fingerprint, serial and CNs.

    mokutil prints `[key N]`, `SHA1 Fingerprint: aa:bb:…`, then the certificate as
    `openssl x509 -text` does: `Serial Number:` with the colon-hex on the next line (or
    `Serial Number: 4660 (0x1234)` for short serials), `Issuer: …, CN=…`, `Subject: …`.
    A truncated listing gives what it shows (missing fields are None).
    """
    certs: list[MokCertificate] = []
    current: dict[str, str | None] | None = None
    want_serial = False

    def close() -> None:
        if current is not None and current.get("fingerprint"):
            certs.append(MokCertificate(
                fingerprint=str(current["fingerprint"]), serial=current.get("serial"),
                issuer_cn=current.get("issuer_cn"), subject_cn=current.get("subject_cn"),
            ))

    for raw in node_lines(text):
        line = raw.strip()
        fingerprint = _FINGERPRINT.match(line)
        if fingerprint is not None:
            close()
            current = {"fingerprint": fingerprint["fp"].lower()}
            want_serial = False
            continue
        if current is None:
            continue
        if want_serial:
            want_serial = False
            if _HEX_LINE.match(line):
                current["serial"] = normalise_serial(line)
                continue
        inline = _SERIAL_INLINE.match(line)
        if inline is not None:
            current["serial"] = normalise_serial(inline["hex"])
        elif line.startswith("Serial Number:"):
            want_serial = True
        elif line.startswith("Issuer:") and "issuer_cn" not in current:
            current["issuer_cn"] = _cn(line.removeprefix("Issuer:"))
        elif line.startswith("Subject:") and "subject_cn" not in current:
            current["subject_cn"] = _cn(line.removeprefix("Subject:"))
    close()
    return tuple(certs)


def parse_mok_enrolled(text: str) -> tuple[str, ...]:
    """`mokutil --list-enrolled` → SHA-1 fingerprints (lower-case, colon-separated)."""
    return tuple(cert.fingerprint for cert in parse_mok_certificates(text))


#: whether Secure Boot is on
state_sections = fixed(("sb-state", cmd("mokutil", "--sb-state")))


def key_sections(plan: FactPlan) -> list[Read]:
    """The enrolled MOK keys, and those imported but not yet enrolled, when the plan asks."""
    if not plan.mok_keys:
        return []
    return [("mok-enrolled", cmd("mokutil", "--list-enrolled")), ("mok-new", cmd("mokutil", "--list-new"))]


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """Secure Boot's `NodeFacts` fields."""
    return {
        "secure_boot": _secure_boot(r),
        "mok_certificates": (r.parse("mok-enrolled", parse_mok_certificates) or ()) if plan.mok_keys else (),
        "mok_pending": _mok_pending(r) if plan.mok_keys else (),
    }


def _secure_boot(r: Reader) -> SecureBoot | None:
    """`mokutil --sb-state`: mokutil says `EFI variables are not supported…` on stderr and
    fails, which is an answer too; anything else unreadable is an error."""
    section = r.sections.get("sb-state")
    if section is not None:
        with suppress(ValueError):
            return parse_sb_state(section.output + section.stderr)
    return r.parse("sb-state", parse_sb_state)


def _mok_pending(r: Reader) -> tuple[MokCertificate, ...]:
    """`mokutil --list-new`: the imported certificates not yet enrolled (it exits 1 and says
    `MokNew is empty` when there are none; an unreadable answer counts as none)."""
    section = r.sections.get("mok-new")
    if section is not None and section.status == 0:
        with suppress(ValueError):
            return parse_mok_certificates(section.output)
    return ()
