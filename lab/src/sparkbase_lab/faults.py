"""Emulated hardware faults: inject into / clear from one node.

A fault is a key in the node's `firmware/faults.json` (outside the node's disk, visible in
the node at `/run/sparkbase-lab/firmware/faults.json`). Injecting or clearing one rewrites
that file and sends SIGUSR1 to the node's PID 1, which re-applies it at once (sshd stopped,
frozen or restarted; sysfs refreshed). Faults persist across reboots and `down`/`up` until
cleared (a real GB10 clock latch also survives a reboot). Nothing on the machine changes.
Secure Boot faults change what `mokutil` prints at once and module loading from the next boot.

| kind | ARG | effect |
| --- | --- | --- |
| gpu-busy | - | nvidia-smi: under load at speed, 2418 MHz, ~35 W, 97 % (else idle: 562 MHz, ~4 W, P8) |
| gpu-latch | - | nvidia-smi: the latch under load: 611 MHz, ~10 W, 98 % busy, no clock-event reason |
| gid-moved | - | the IPv4 GIDs move from index 2/3 to 4/5 |
| link-down | HCA or netdev (default rocep1s0f0) | port DOWN, netdev without carrier |
| unreachable | - | every process of the node ends, no sshd: connections refused |
| hang | - | sshd frozen (SIGSTOP): connections time out |
| kernel-panic | RELEASE | that kernel does not boot; the node falls back |
| governor | - | scaling_governor `powersave` on every CPU |
| sb-not-enforcing | - | `SecureBoot enabled` + `…validation is disabled in shim`; unsigned modules load |
| sb-disabled | - | `SecureBoot disabled`; from the next boot signatures are not checked |
| sb-setup-mode | - | `SecureBoot disabled` + `Platform is in Setup Mode` |
| no-efi | - | `mokutil`: `EFI variables are not supported on this system` (exit 1) |
| pxe-first | - | `efibootmgr`: a network (PXE) entry `Boot0002` first in BootOrder, before Ubuntu |
| drm-master | - | a display server (`Xorg`) holds DRM master of card 0 (`/sys/kernel/debug/dri/0/clients`) |
| console-graphics | - | the active console (tty1) is in graphics mode (KDGETMODE 1), as a splash leaves it |
| dkms-noise | - | `dkms status` adds DKMS 3 noise on stderr: `Deprecated feature: …`, `Error! …` |
| lane-env | - | a lane unit started from now on gets `NCCL_IB_MERGE_NICS=1` in its environment |
| lane-worker-env | - | a lane unit started from now on sets `NCCL_IB_MERGE_NICS=1` in itself (workers) |
| lane-conf-twice | - | a lane unit started from now on reads an NCCL_CONF_FILE setting MERGE_NICS 1, then 0 |
| lane-private-nccl | - | a lane unit started from now on maps /opt/lane-image/lib/libnccl.so.2 |
| lane-outside-slice | - | a lane unit started from now on runs outside the serving slice |
| lane-sessions | - | the node's lane stand-in reports four 500K-class sessions (trigger 2 fires) |
| build-changes-output | BUILD (default `*`) | the build answers about one prompt in eleven otherwise |
| build-slower | BUILD (default `*`) | the build prefills and decodes 1.5 times slower |
| build-noisy | BUILD (default `*`) | each start of the build at another speed (0.6-1.4x), ±25% a request |
| other-traffic | - | the node's lane stand-in reports two more running requests (somebody else's) |
| container-env | CONTAINER | the container (default dsv41-flash) run again with `NCCL_IB_MERGE_NICS=1` |
| container-image | CONTAINER | the container run again from another digest of its repository |
| stale-address | NETDEV | an old netplan file leaves the port (default enp1s0f0np0) a second address |

BUILD is a lane unit's name or, for a container, `image-` and the first 12 hex digits of its
image's digest (the stand-in's `SPARKBASE_LAB_BUILD`), `*` every build. The
`build-*` faults and `other-traffic` are read by the lane stand-in's API at every request
and scrape (shims/openai_api.py): they apply at once, to a stand-in already running.

The last three are what a person does to a running node, done the same way over SSH
(`operator_faults.py`); the key records what to put back, and `--clear` puts it back.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Any

from sparkbase.atomicfile import write_atomic
from sparkbase_lab import boot, operator_faults, procs
from sparkbase_lab.fleet import Lab, LabError

KINDS = ("gpu-latch", "gpu-busy", "gid-moved", "link-down", "unreachable", "hang", "kernel-panic", "governor",
         "sb-not-enforcing", "sb-disabled", "sb-setup-mode", "no-efi", "pxe-first", "drm-master",
         "console-graphics", "dkms-noise",
         "lane-env", "lane-worker-env", "lane-conf-twice", "lane-private-nccl", "lane-outside-slice",
         "lane-sessions", "build-changes-output", "build-slower", "build-noisy", "other-traffic",
         *operator_faults.KINDS)
#: faults holding a list of values (one inject per value)
LIST_KINDS = ("link-down", "kernel-panic", "build-changes-output", "build-slower", "build-noisy")
#: faults whose value is an engine build (a lane unit's name; `*` for every build)
BUILD_KINDS = ("build-changes-output", "build-slower", "build-noisy")
#: faults the lane stand-in reads at every request: written without asking the node to
#: re-apply its faults (that refresh rewrites the emulated hardware, which a read of it at
#: the same moment, the gate's, would see half done)
READ_AT_USE = (*BUILD_KINDS, "other-traffic")
#: seconds `inject` and `clear` wait for the node's init to apply a change (it restarts sshd
#: and refreshes the emulated hardware: well under a second on a quiet machine)
APPLY_TIMEOUT = 30.0


def _path(lab: Lab, node: str) -> Path:
    if node not in lab.node_names:
        raise LabError(f"unknown node {node!r} (nodes: {', '.join(lab.node_names)})")
    return lab.node_dir(node) / "firmware" / "faults.json"


def read(lab: Lab, node: str) -> dict[str, Any]:
    """The node's active faults."""
    try:
        data: dict[str, Any] = json.loads(_path(lab, node).read_text())
    except (OSError, ValueError):
        return {}
    return data


def _write(lab: Lab, node: str, data: dict[str, Any], apply: bool = True) -> None:
    path = _path(lab, node)
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    if not apply:
        return
    try:
        init = lab.init_proc(node)
    except LabError:
        return  # not running: applies at the next boot
    procs.kill(init, signal.SIGUSR1)
    _wait_applied(lab, node, path.read_text())
    lab.close_shared_connections(node)  # the next command logs in afresh, as after a real fault


def _wait_applied(lab: Lab, node: str, text: str, timeout: float = APPLY_TIMEOUT) -> None:
    """Wait until the node's init has applied `text` (it writes what it applied to
    `faults.applied`), so the fault is in place when `inject` returns."""
    applied = _path(lab, node).with_name("faults.applied")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if applied.read_text() == text:
                return
        time.sleep(0.02)
    raise LabError(f"{node} did not apply its faults within {timeout:.0f}s")


def _check_arg(kind: str, arg: str | None) -> str | None:
    if kind not in KINDS:
        raise LabError(f"unknown fault {kind!r} (one of {', '.join(KINDS)})")
    if kind == "link-down":
        arg = arg or "rocep1s0f0"
        if arg not in boot.FABRIC and arg not in boot.FABRIC.values():
            names = ", ".join([*boot.FABRIC, *boot.FABRIC.values()])
            raise LabError(f"link-down: unknown HCA or netdev {arg!r} (one of {names})")
        return arg
    if kind == "kernel-panic":
        if not arg:
            raise LabError("kernel-panic needs a kernel RELEASE")
        return arg
    if kind in BUILD_KINDS:
        return arg or "*"
    if arg:
        raise LabError(f"fault {kind} takes no argument")
    return None


def _index(node: str) -> int:
    return int(node.removeprefix("spark")) if node.removeprefix("spark").isdigit() else 1


def inject(lab: Lab, node: str, kind: str, arg: str | None = None) -> None:
    """Inject fault `kind` (with `arg` for link-down/kernel-panic, a container or netdev for
    the operator faults) into `node`."""
    if kind in operator_faults.KINDS:
        _path(lab, node)
        data = read(lab, node)
        if kind not in data:
            given = operator_faults.check_arg(kind, arg)
            data[kind] = operator_faults.inject(lab, node, kind, given, _index(node))
            _write(lab, node, data)
        return
    value = _check_arg(kind, arg)
    data = read(lab, node)
    if kind in LIST_KINDS:
        items = list(data.get(kind, []))
        if value not in items:
            items.append(value)
        data[kind] = items
    else:
        data[kind] = True
    _write(lab, node, data, apply=kind not in READ_AT_USE)


def clear(lab: Lab, node: str, kind: str, arg: str | None = None) -> None:
    """Clear fault `kind` on `node` (for list faults without `arg`: every entry)."""
    if kind not in KINDS:
        raise LabError(f"unknown fault {kind!r} (one of {', '.join(KINDS)})")
    data = read(lab, node)
    if kind in operator_faults.KINDS:
        if kind in data:
            operator_faults.clear(lab, node, kind, data[kind])
            data.pop(kind)
            _write(lab, node, data)
        return
    if kind in LIST_KINDS and arg:
        value = _check_arg(kind, arg)
        data[kind] = [v for v in data.get(kind, []) if v != value]
        if not data[kind]:
            data.pop(kind)
    else:
        data.pop(kind, None)
    _write(lab, node, data, apply=kind not in READ_AT_USE)


def clear_all(lab: Lab, node: str) -> None:
    """Remove every fault from `node` (the operator faults undone first)."""
    for kind in operator_faults.KINDS:
        if kind in read(lab, node):
            clear(lab, node, kind)
    _write(lab, node, {})
