"""Paths typed by purpose: what each type accepts (the refusals are invalid-site cases,
`tests/cases/invalid/path-*`)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from sparkbase.model.paths import DisableableUnit, LibraryPath, MokKeyPath, SliceUnit, SwapFilePath

ACCEPTED: list[tuple[Any, str]] = [
    (SwapFilePath, "/swapfile"),
    (SwapFilePath, "/swap.img"),
    (SwapFilePath, "/swap-64k.img"),
    (SwapFilePath, "/var/swap/swapfile"),
    (SwapFilePath, "/home/swapfile"),
    (MokKeyPath, "/var/lib/shim-signed/mok/MOK.priv"),
    (MokKeyPath, "/etc/sparkbase/mok/MOK.der"),
    (MokKeyPath, "/root/mok/MOK.priv"),
    (LibraryPath, "/opt/nccl-site/lib/libnccl.so.2.27.7"),
    (LibraryPath, "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9"),
    (SliceUnit, "sparkbase-serving.slice"),
    (SliceUnit, "serving.slice"),
    (DisableableUnit, "gdm3.service"),
    (DisableableUnit, "cups.socket"),
    (DisableableUnit, "cups.path"),  # spark-ds41f scripts/host-recovery idle_units (052248c1)
    (DisableableUnit, "apt-daily.timer"),
    (DisableableUnit, "spark-fan-control.service"),
]

REFUSED: list[tuple[Any, str]] = [
    (SwapFilePath, "/etc/passwd"),
    (SwapFilePath, "/var/lib/dpkg/status"),
    (SwapFilePath, "/var"),
    (MokKeyPath, "/etc/MOK.priv"),
    (MokKeyPath, "/MOK.der"),
    (MokKeyPath, "/var/lib/shim-signed/MOK.der"),
    (LibraryPath, "/dev/zero"),
    (SliceUnit, "ssh.service"),
    (SliceUnit, "system.slice"),
    (SliceUnit, "system-getty.slice"),
    (DisableableUnit, "ssh.service"),
    (DisableableUnit, "local-fs.target"),
    (DisableableUnit, "home.mount"),
    (DisableableUnit, "systemd-logind.service"),
    (DisableableUnit, "getty@tty1.service"),
    (DisableableUnit, "graphical.target"),
]


@pytest.mark.parametrize(("kind", "value"), ACCEPTED, ids=[v for _, v in ACCEPTED])
def test_purpose_types_accept_ordinary_values(kind: Any, value: str) -> None:
    assert TypeAdapter(kind).validate_python(value) == value


@pytest.mark.parametrize(("kind", "value"), REFUSED, ids=[v for _, v in REFUSED])
def test_purpose_types_refuse_dangerous_values(kind: Any, value: str) -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(kind).validate_python(value)
