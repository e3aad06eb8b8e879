"""Paths and unit names typed by what sparkbase does with them.

A baseline names paths sparkbase creates, and on *other* nodes retires: a swap file is
`swapoff`ed and deleted, a MOK key directory is created 0700 and later removed, a slice
file is written under /etc/systemd/system, a unit is disabled and stopped. A plain
absolute path or unit name is not enough for that: `/etc/passwd` as a swap file or
`ssh.service` as a unit to disable would let a baseline that `validate` accepts damage
or cut off a node. Each type here refuses, where the data enters, what its purpose makes
dangerous, with a message saying why; the errors are located like every other field's.

Ownership (`sparkbase.policy.ownership`) is the second line of defence: even a path these
types accept is only ever removed when sparkbase recorded creating it.
"""

from __future__ import annotations

import posixpath
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

from sparkbase.model.netplan import SITE_NETPLAN_DIR, SPARKBASE_NETPLAN_PATH
from sparkbase.model.types import AbsPath

#: trees that belong to the kernel, the package manager or early boot, or that do not
#: survive a reboot: a swap file must never sit in them (virtual file systems, tmpfs, the OS
#: image, the bootloader, dpkg/apt state and sparkbase's own ownership record)
SYSTEM_TREES: tuple[str, ...] = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/tmp", "/usr", "/var/lib/apt", "/var/lib/dpkg", "/var/lib/sparkbase", "/var/tmp",
)

#: directories that hold other things: a MOK key directory is created 0700 and, when no
#: baseline of the node wants it any more, removed, so it must be one of its own
SHARED_DIRECTORIES: frozenset[str] = frozenset({
    "/", "/etc", "/home", "/media", "/mnt", "/opt", "/root", "/snap", "/srv", "/tmp", "/var",
    "/var/backups", "/var/cache", "/var/lib", "/var/lib/dkms", "/var/lib/shim-signed",
    "/var/local", "/var/log", "/var/mail", "/var/opt", "/var/spool", "/var/tmp",
})

#: MOK keys must survive a reboot (the enrolment completes at the next boot) and must not
#: sit where the OS image, the kernel or another tool keeps its files
MOK_FORBIDDEN_TREES: tuple[str, ...] = (
    "/bin", "/boot", "/dev", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
    "/sys", "/tmp", "/usr", "/var/tmp", "/etc/ssh", "/root/.ssh", "/var/lib/apt", "/var/lib/dpkg",
    "/var/lib/sparkbase",
)

#: a library is read (hashed, loaded): never from a device or a kernel interface
LIBRARY_FORBIDDEN_TREES: tuple[str, ...] = ("/dev", "/proc", "/sys")

#: slices systemd itself creates and manages (the root slice and its three children)
SYSTEM_SLICES: frozenset[str] = frozenset({"-.slice", "system.slice", "user.slice", "machine.slice"})

#: units sparkbase must never disable: what it needs to reach or manage the node.
#:
#: - `ssh` / `sshd` (service and socket, and per-connection `sshd@`): sparkbase reaches every
#:   node over SSH only; disabling them cuts it (and the operator) off.
#: - `dbus` / `dbus-broker`: `systemctl` talks to systemd over D-Bus; without it sparkbase can
#:   no longer enable, disable or inspect units.
#: - `networking`, `NetworkManager`, `netplan-*`, `ifup@`: the management and fabric networks
#:   (sparkbase writes a netplan and applies it; the management NIC carries the SSH session).
#: - `getty@` / `serial-getty@` / `console-getty`: the console is the way back in when SSH
#:   fails, and where host keys are enrolled.
#: - `user@` / `user-runtime-dir@`: the login session of a non-root `ssh.user` with sudo.
#: - `emergency` / `rescue`: recovery when a kernel sparkbase installed does not boot.
#:
#: `systemd-*` units (journald, logind, udevd, networkd, resolved, ...) are refused by prefix
#: (`PROTECTED_UNIT_PREFIXES`) and targets by suffix: a target is a boot synchronisation point
#: (the boot target is set by `host.boot_target`, never by disabling one). `cron` is not
#: listed: sparkbase never relies on it.
PROTECTED_UNITS: frozenset[str] = frozenset({
    "ssh.service", "ssh.socket", "sshd.service", "sshd.socket", "sshd@.service",
    "dbus.service", "dbus.socket", "dbus-broker.service",
    "networking.service", "NetworkManager.service", "NetworkManager-wait-online.service",
    "getty@.service", "serial-getty@.service", "console-getty.service", "autovt@.service",
    "user@.service", "user-runtime-dir@.service",
    "emergency.service", "rescue.service",
})
#: name prefixes of units sparkbase must never disable (see `PROTECTED_UNITS`)
PROTECTED_UNIT_PREFIXES: tuple[str, ...] = (
    "systemd-", "netplan-", "ifup@", "getty@", "serial-getty@", "sshd@", "user@", "user-runtime-dir@",
)


def _under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def _first_tree(path: str, trees: tuple[str, ...]) -> str | None:
    return next((tree for tree in trees if _under(path, tree)), None)


def _swap_file(value: str) -> str:
    tree = _first_tree(value, SYSTEM_TREES)
    if tree is not None:
        raise ValueError(f"a swap file must not be under {tree} (system or volatile files live "
                         "there; other nodes delete the swap files of baselines they do not run)")
    if value in SHARED_DIRECTORIES:
        raise ValueError(f"{value} is a directory, not a swap file name")
    return value


def _mok_key_file(value: str) -> str:
    directory = posixpath.dirname(value)
    tree = _first_tree(directory, MOK_FORBIDDEN_TREES)
    if tree is not None:
        raise ValueError(f"MOK keys must not be under {tree}: give a dedicated directory such as "
                         "/var/lib/shim-signed/mok")
    if directory in SHARED_DIRECTORIES or directory.count("/") < 2:
        raise ValueError(f"the MOK key directory {directory} holds other things: give a dedicated "
                         "directory such as /var/lib/shim-signed/mok (sparkbase creates it 0700 and "
                         "removes it when no baseline of the node signs with it)")
    return value


def _library_file(value: str) -> str:
    tree = _first_tree(value, LIBRARY_FORBIDDEN_TREES)
    if tree is not None:
        raise ValueError(f"a library path must not be under {tree} (devices and kernel interfaces "
                         "are not files to hash or load)")
    return value


def _slice_unit(value: str) -> str:
    if value in SYSTEM_SLICES or value.startswith(("system-", "user-", "machine-")):
        raise ValueError(f"{value} is a slice systemd manages itself: name a slice of your own, "
                         "e.g. sparkbase-serving.slice")
    stem = value.removesuffix(".slice")
    if stem.endswith("-") or "--" in stem:
        raise ValueError(f"{value} is not a valid slice name (dashes separate parent slices: "
                         "no empty part)")
    return value


def _site_netplan_file(value: str) -> str:
    if posixpath.dirname(value) != SITE_NETPLAN_DIR or not value.endswith(".yaml"):
        raise ValueError(f"{value} is not a file netplan reads from {SITE_NETPLAN_DIR}: give "
                         f"{SITE_NETPLAN_DIR}/NAME.yaml (netplan reads only *.yaml there, not in "
                         "subdirectories)")
    if value == SPARKBASE_NETPLAN_PATH:
        raise ValueError(f"{value} is sparkbase's own fabric file: leave fabric.netplan_file unset to "
                         "have sparkbase write it, or name the site's own netplan file")
    return value


def _disableable_unit(value: str) -> str:
    if value in PROTECTED_UNITS or value.startswith(PROTECTED_UNIT_PREFIXES):
        raise ValueError(f"sparkbase must not disable {value}: it needs it to reach or manage the "
                         "node (see sparkbase.model.paths.PROTECTED_UNITS)")
    return value


SwapFilePath = Annotated[AbsPath, AfterValidator(_swap_file)]
"""A swap file sparkbase creates (and deletes on nodes of other baselines): absolute,
normalised, a file name, never under a system tree (`SYSTEM_TREES`)."""

MokKeyPath = Annotated[AbsPath, AfterValidator(_mok_key_file)]
"""A MOK certificate or private key file, in a directory dedicated to MOK keys (created
0700 by sparkbase, removed when no baseline of the node signs with it)."""

LibraryPath = Annotated[AbsPath, AfterValidator(_library_file)]
"""A shared library file: absolute, normalised, no `..`, not under /dev, /proc or /sys."""

SiteNetplanFile = Annotated[AbsPath, AfterValidator(_site_netplan_file)]
"""A site's own netplan file sparkbase takes the fabric over in (`fabric.netplan_file`):
`/etc/netplan/NAME.yaml`, never sparkbase's own `60-sparkbase-fabric.yaml`."""

SliceUnit = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,240}\.slice$"),
    AfterValidator(_slice_unit),
]
"""A systemd slice sparkbase writes: `NAME.slice`, a valid unit name, not one of systemd's."""

DisableableUnit = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9@_.-]{0,240}\.(service|socket|timer|path)$"),
    AfterValidator(_disableable_unit),
]
"""A unit sparkbase may disable and stop: a service, socket, timer or path unit (cups.path),
never one it needs to reach or manage the node (`PROTECTED_UNITS`, `PROTECTED_UNIT_PREFIXES`)."""
