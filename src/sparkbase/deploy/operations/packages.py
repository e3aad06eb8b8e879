"""Package operations: apt update when needed, pinned installs (recorded when new), holds."""

from __future__ import annotations

from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import node_facts
from sparkbase.deploy.operations.base import cmd, noop
from sparkbase.deploy.operations.record import remember
from sparkbase.model.ownership import Kind, created, now_utc


def missing_pins(pins: list[str], installed: dict[str, list[str]]) -> list[str]:
    """`name=version` pins not installed at exactly that version."""
    missing = []
    for pin in pins:
        name, _, version = pin.partition("=")
        if version not in installed.get(name, []):
            missing.append(pin)
    return missing


def installed_versions() -> dict[str, list[str]]:
    """The node's installed packages (of those the steps name) and their versions."""
    return {name: [version] for name, version in node_facts().packages.items()}


@operation()
def apt_update_for(pins: list[str]) -> Any:
    """`apt-get update`, only when a pinned package is not installed at its version."""
    missing = missing_pins(pins, installed_versions())
    if not missing:
        noop(f"all {len(pins)} pinned packages are installed at their versions")
        return
    yield "DEBIAN_FRONTEND=noninteractive apt-get update -q"


#: apt-get install options: keep local config files, allow a pin to move a held package up or down
APT_INSTALL = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q",
               "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
               "install", "--allow-downgrades", "--allow-change-held-packages"]


@operation()
def pinned_packages(pins: list[str], baseline: str = "") -> Any:
    """Install `name=version` pins not installed at that version; the packages that were not
    installed at all before are recorded as sparkbase's (a package it only moved is not)."""
    installed = installed_versions()
    missing = missing_pins(pins, installed)
    if not missing:
        noop(f"all {len(pins)} pinned packages are installed at their versions")
        return
    yield cmd(*APT_INSTALL, *missing)
    now = now_utc()
    new = [pin.partition("=") for pin in missing if not installed.get(pin.partition("=")[0])]
    yield from remember(*(created(Kind.PACKAGE, name, baseline, now, version=version)
                          for name, _, version in new))


@operation()
def hold(names: list[str]) -> Any:
    """`apt-mark hold` the pinned packages that are not held yet."""
    held = set(node_facts().held)
    todo = [name for name in names if name not in held]
    if not todo:
        noop(f"all {len(names)} pinned packages are held")
        return
    yield cmd("apt-mark", "hold", *todo)
