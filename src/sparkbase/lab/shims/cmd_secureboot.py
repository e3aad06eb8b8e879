"""`mokutil`: Secure Boot state and the MOK keys in the node's firmware."""

from __future__ import annotations

import sys

from sparkbase.lab.shims.common import FIRMWARE, Fail, LazyModule, firmware, write_json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkbase.lab import boot as B
else:
    B = LazyModule("sparkbase.lab.boot")


def key_record(path: str) -> dict[str, str]:
    """A DER certificate file as firmware keeps it: fingerprint, subject, base64 DER."""
    import base64
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise Fail(f"Failed to read {path}: {exc.strerror}") from exc
    if not data:
        raise Fail(f"Failed to read {path}")
    return {"fingerprint": B.sha1_fingerprint(data), "subject": _subject(path),
            "der": base64.b64encode(data).decode()}


def _subject(path: str) -> str:
    import subprocess
    try:
        out = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", path, "-noout",
                              "-subject"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "CN=unknown"
    line = out.stdout.strip()
    return line.split("=", 1)[1].strip() if out.returncode == 0 and "=" in line else "CN=unknown"


def _print_keys(keys: list[dict[str, str]]) -> None:
    for i, key in enumerate(keys, 1):
        print(f"[key {i}]\nSHA1 Fingerprint: {key['fingerprint']}\nCertificate:\n    Data:\n"
              f"        Subject: {key.get('subject', '')}\n")


def cmd_mokutil(argv: list[str]) -> int:
    """`mokutil --sb-state|--list-enrolled|--list-new|--import|--test-key|--revoke-import`."""
    fw = firmware()
    if not argv:
        raise Fail("mokutil: no operation given", 1)
    op = argv[0]
    if op == "--sb-state":
        print("SecureBoot enabled" if fw["secure_boot"] else "SecureBoot disabled")
        return 0
    if op in ("--list-enrolled", "-l"):
        _print_keys(fw["enrolled"])
        return 0
    if op in ("--list-new", "-N"):
        if not fw["pending"]:
            print("MokNew is empty")
            return 1
        _print_keys(fw["pending"])
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
