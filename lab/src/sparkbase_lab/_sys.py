"""Thin ctypes wrappers for the mount-namespace syscalls node init needs.

Only `node_init` uses these, as PID 1 of a node's private mount namespace; they never run
against the machine's own mount table.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str, target: str, fstype: str | None, flags: int = 0, data: str = "") -> None:
    """mount(2): raise OSError on failure."""
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source} on {target}",
    )


def umount(target: str, flags: int = MNT_DETACH) -> None:
    """umount2(2), lazily by default."""
    _check(_libc.umount2(target.encode(), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2) (glibc has no wrapper)."""
    number = _SYS_PIVOT_ROOT[platform.machine()]
    _check(_libc.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")
