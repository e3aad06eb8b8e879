"""Module signatures judged as kmod reports them (serial, issuer CN) against the enrolled
certificate the baseline pins by SHA-1 fingerprint; real modinfo and mokutil samples."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparkbase.facts.model import ModuleInfo, MokCertificate
from sparkbase.facts.parsers.modules import parse_modinfo
from sparkbase.facts.parsers.secure_boot import normalise_serial, parse_mok_certificates
from sparkbase.facts.signing import judge_signature

REAL = Path(__file__).parents[1] / "fixtures" / "real"
#: the hailo_pci module, DKMS-signed (real `modinfo` output)
HAILO = parse_modinfo((REAL / "modinfo_hailo_pci__aarch64_dkms_signed.txt").read_text(), 0)
#: the enrolled certificates of a real `mokutil --list-enrolled`
CANONICAL = parse_mok_certificates(
    (REAL / "mokutil_--list-enrolled__ubuntu22.04_linux-surface-906.txt").read_text()
)
#: the DKMS key that signed HAILO, as mokutil would list it (fingerprint made up)
DKMS_KEY = MokCertificate("aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd",
                          "408b664ebcff14ee69a1b91978d5f8ff383f213a",
                          "DKMS module signing key", "DKMS module signing key")


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("40:8B:66:4E", "408b664e"),
        ("00:8b:66", "8b66"),
        ("0x0408B", "408b"),
        ("b9:41:24:a0:18:2c:92:67", "b94124a0182c9267"),
    ],
)
def test_serials_compare_whatever_case_colons_and_leading_zeros(text: str, normal: str) -> None:
    assert normalise_serial(text) == normal


def test_serial_that_is_no_hex_is_refused() -> None:
    with pytest.raises(ValueError):
        normalise_serial("DKMS module signing key")


@pytest.mark.parametrize(
    ("case", "info", "enrolled", "fingerprint", "ok"),
    [
        ("signed by the pinned, enrolled key", HAILO, (*CANONICAL, DKMS_KEY), DKMS_KEY.fingerprint, True),
        ("no pin: any enrolled signer counts", HAILO, (*CANONICAL, DKMS_KEY), None, True),
        ("the pinned key is another enrolled one", HAILO, (*CANONICAL, DKMS_KEY), CANONICAL[0].fingerprint,
         False),
        ("the pinned key is not enrolled", HAILO, CANONICAL, DKMS_KEY.fingerprint, False),
        ("no pin and no enrolled signer", HAILO, CANONICAL, None, False),
        ("same serial, other issuer", HAILO, (replace(DKMS_KEY, issuer_cn="someone else"),),
         DKMS_KEY.fingerprint, False),
        ("unsigned", replace(HAILO, sig_key=None, signer=None), (DKMS_KEY,), DKMS_KEY.fingerprint, False),
        ("modinfo failed", ModuleInfo(error="modinfo: ERROR: Module x not found."), (DKMS_KEY,), None, False),
        ("the fingerprint, not the serial, in sig_key (the old emulator)",
         replace(HAILO, sig_key=DKMS_KEY.fingerprint.upper()), (DKMS_KEY,), DKMS_KEY.fingerprint, False),
    ],
)
def test_judge_signature(case: str, info: ModuleInfo, enrolled: tuple[MokCertificate, ...],
                         fingerprint: str | None, ok: bool) -> None:
    verdict = judge_signature(info, enrolled, fingerprint)
    assert verdict.ok is ok, f"{case}: {verdict.detail}"
    assert (verdict.problem is None) is ok
    assert verdict.detail
