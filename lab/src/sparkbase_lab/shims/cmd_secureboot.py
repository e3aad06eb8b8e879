"""`mokutil`: Secure Boot state and the MOK keys in the node's firmware."""

from __future__ import annotations

import sys

from sparkbase_lab.shims.common import FIRMWARE, Fail, LazyModule, faults, firmware, write_json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from sparkbase_lab import boot as B
else:
    B = LazyModule("sparkbase_lab.boot")


#: Secure Boot faults, strongest first: what `mokutil --sb-state` prints for each
SB_FAULTS = ("no-efi", "sb-setup-mode", "sb-disabled", "sb-not-enforcing")
NO_EFI = "EFI variables are not supported on this system"


def sb_state(fw: dict[str, Any], flt: dict[str, Any]) -> list[str]:
    """The lines `mokutil --sb-state` prints (mokutil 0.6/0.7 strings, real samples in
    tests/fixtures/real/mokutil_--sb-state__*)."""
    if flt.get("sb-setup-mode"):
        return ["SecureBoot disabled", "Platform is in Setup Mode"]
    if flt.get("sb-disabled") or not fw.get("secure_boot", True):
        return ["SecureBoot disabled"]
    if flt.get("sb-not-enforcing"):
        return ["SecureBoot enabled", "SecureBoot validation is disabled in shim"]
    return ["SecureBoot enabled"]


def enforcing(fw: dict[str, Any], flt: dict[str, Any]) -> bool:
    """Whether the kernel refuses modules not signed by an enrolled key (Secure Boot on and
    shim validating)."""
    return not flt.get("no-efi") and sb_state(fw, flt) == ["SecureBoot enabled"]


def _openssl_text(path: str) -> str:
    """`openssl x509 -text` of a DER certificate with names as mokutil prints them
    (X509_print: `C=GB, ST=…, CN=…`); empty when openssl cannot read it."""
    import subprocess

    try:
        out = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", path, "-noout", "-text",
                              "-nameopt", "compat"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout if out.returncode == 0 else ""


def certificate_fields(text: str) -> dict[str, str]:
    """Serial (upper-case colon hex, as kmod prints `sig_key`), issuer and subject from
    `openssl x509 -text` output."""
    fields: dict[str, str] = {}
    lines = [line.strip() for line in text.splitlines()]
    for index, line in enumerate(lines):
        if line.startswith("Serial Number:") and "serial" not in fields:
            inline = line.removeprefix("Serial Number:").strip()
            if inline:  # short serials: `4660 (0x1234)`
                digits = f"{int(inline.split()[0]):x}"
                digits = "0" * (len(digits) % 2) + digits
                fields["serial"] = ":".join(digits[i:i + 2] for i in range(0, len(digits), 2)).upper()
            elif index + 1 < len(lines):
                fields["serial"] = lines[index + 1].upper()
        elif line.startswith("Issuer:") and "issuer" not in fields:
            fields["issuer"] = line.removeprefix("Issuer:").strip()
        elif line.startswith("Subject:") and "subject" not in fields:
            fields["subject"] = line.removeprefix("Subject:").strip()
    return fields


def common_name(name: str) -> str:
    """The CN of a distinguished name printed as `C=GB, …, CN=Some Name`."""
    for part in name.split(", "):
        if part.startswith("CN="):
            return part[3:]
    return name


def key_record(path: str) -> dict[str, str]:
    """A DER certificate file as firmware keeps it: SHA-1 fingerprint, serial, issuer,
    subject, the text mokutil prints for it, and the DER itself (base64)."""
    import base64

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise Fail(f"Failed to read {path}: {exc.strerror}") from exc
    if not data:
        raise Fail(f"Failed to read {path}")
    text = _openssl_text(path)
    if not text:
        raise Fail(f"{path} is not a valid x509 certificate")
    return {"fingerprint": B.sha1_fingerprint(data), **certificate_fields(text), "text": text,
            "der": base64.b64encode(data).decode()}


def _key_text(key: dict[str, str]) -> str:
    """The certificate text of a firmware key (recomputed for records kept from older labs)."""
    if key.get("text"):
        return key["text"]
    import base64
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".der") as tmp:
        tmp.write(base64.b64decode(key.get("der", "")))
        tmp.flush()
        text = _openssl_text(tmp.name)
    return text or f"Certificate:\n    Data:\n        Subject: {key.get('subject', '')}\n"


def print_keys(keys: list[dict[str, str]]) -> None:
    """`mokutil --list-enrolled` / `--list-new`: `[key N]`, the SHA-1 fingerprint, then the
    certificate as X509_print writes it; a blank line between keys."""
    for index, key in enumerate(keys, 1):
        if index > 1:
            print()
        print(f"[key {index}]\nSHA1 Fingerprint: {key['fingerprint']}")
        print(_key_text(key), end="")


def cmd_mokutil(argv: list[str]) -> int:
    """`mokutil --sb-state|--list-enrolled|--list-new|--import|--test-key|--revoke-import`."""
    fw = firmware()
    flt = faults()
    if not argv:
        raise Fail("mokutil: no operation given", 1)
    if flt.get("no-efi"):
        raise Fail(NO_EFI, 1)
    op = argv[0]
    if op == "--sb-state":
        print("\n".join(sb_state(fw, flt)))
        return 0
    if op in ("--list-enrolled", "-l"):
        print_keys(fw["enrolled"])
        return 0
    if op in ("--list-new", "-N"):
        if not fw["pending"]:
            print("MokNew is empty")
            return 1
        print_keys(fw["pending"])
        return 0
    if op in ("--import", "-i"):
        if len(argv) < 2:
            raise Fail("mokutil: --import needs a file")
        rec = key_record(argv[1])
        if rec["fingerprint"] in {k["fingerprint"] for k in fw["enrolled"]}:
            print(f"SKIP: {argv[1]} is already enrolled")
            return 0
        if rec["fingerprint"] in {k["fingerprint"] for k in fw["pending"]}:
            print(f"SKIP: {argv[1]} is already in the enrollment request")
            return 0
        rest = argv[2:]
        if not ({"--root-pw", "-P", "--hash-file", "-f"} & set(rest)):
            if sys.stdin.isatty():
                print("input password: \ninput password again: ")
            else:
                sys.stdin.read()
        fw["pending"].append(rec)
        write_json(FIRMWARE, fw)
        return 0
    if op in ("--test-key", "-t"):
        rec = key_record(argv[1])
        if rec["fingerprint"] in {k["fingerprint"] for k in fw["enrolled"]}:
            print(f"{argv[1]} is already enrolled")
            return 0
        print(f"{argv[1]} is not enrolled")
        return 1
    if op == "--revoke-import":
        fw["pending"] = []
        write_json(FIRMWARE, fw)
        return 0
    raise Fail(f"mokutil: {op} is not emulated by the sparkbase lab", 2)


COMMANDS: dict[str, Callable[[list[str]], int]] = {"mokutil": cmd_mokutil}
