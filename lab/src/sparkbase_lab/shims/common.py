"""What every node command shares: paths, state files, failures (runs inside the node).

Every node command is a fresh `python3 -IS`, and the audit's fact script runs several per
node, so start-up is most of what a command costs. This module imports only `os` and
`sys` (JSON is read with the C scanner `_json`, without `json` and `re`); the command
modules (`cmd_*.py`) import it and import anything heavier inside the functions that need
it. Copied into each node with the rest of the package (see `sparkbase_lab.image`).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    StrPath = str | os.PathLike[str]

RUN = "/run/sparkbase-lab"
VAR = "/var/lib/sparkbase-lab"
FIRMWARE = f"{RUN}/firmware/firmware.json"
FAULTS = f"{RUN}/firmware/faults.json"
STATE = f"{RUN}/state.json"
NET = f"{RUN}/net.json"
SWAPS = f"{RUN}/swaps.json"
ACTIVE = f"{RUN}/active"
NODE = "/etc/sparkbase-lab/node.json"
SYSTEMD_ETC = "/etc/systemd/system"
SYSTEMD_LIB = "/lib/systemd/system"
ARCH = "aarch64"
#: where python3-yaml lives on Debian/Ubuntu (not on sys.path under `python3 -S`)
DIST_PACKAGES = "/usr/lib/python3/dist-packages"


class LazyModule:
    """A module imported on first attribute access (for the boot helpers, whose imports
    cost more than most commands do)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            import importlib

            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


class Fail(Exception):
    """A command failure: message for stderr and an exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class _ScanContext:
    """What the C JSON scanner reads from `json.JSONDecoder` (defaults, strict)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


def loads(text: str) -> Any:
    """`json.loads` without importing `json` (and `re` with it); raises ValueError."""
    try:
        from _json import make_scanner
    except ImportError:  # a Python without the C accelerator
        import json

        return json.loads(text)
    body = text.strip(" \t\n\r")
    try:
        value, end = make_scanner(_ScanContext())(body, 0)  # type: ignore[arg-type]  # duck-typed
    except StopIteration as exc:
        raise ValueError("Expecting value") from exc
    if end != len(body):
        raise ValueError("Extra data")
    return value


def dumps(value: Any) -> str:
    """Compact JSON (`json.dumps` output, separators `, ` and `: `) of str/int/bool/None/
    list/dict values, without importing `json` (and `re` with it)."""
    if isinstance(value, str):
        from _json import encode_basestring_ascii

        return str(encode_basestring_ascii(value))
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{dumps(str(k))}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    raise TypeError(f"not JSON: {type(value).__name__}")


def read_json(path: StrPath, default: Any) -> Any:
    """The JSON document in `path`, or `default` when it is missing or not JSON."""
    try:
        return loads(read_file(path))
    except (OSError, ValueError):
        return default


def write_json(path: StrPath, data: Any) -> None:
    """Write `data` to `path` as JSON, atomically (temp file, then replace)."""
    import json

    path = os.fspath(path)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_file(path: StrPath) -> str:
    """The text of `path` (raises OSError)."""
    with open(os.fspath(path)) as fh:
        return fh.read()


def read_text(path: StrPath, default: str = "") -> str:
    """The text of `path`, or `default` when it cannot be read."""
    try:
        return read_file(path)
    except OSError:
        return default


def write_text(path: StrPath, text: str) -> None:
    """Write `text` to `path`, creating its directory."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def glob(pattern: str) -> list[str]:
    """`glob.glob`, imported on first use."""
    import glob as globbing

    return globbing.glob(pattern)


def sorted_conf(pattern: str) -> list[str]:
    """The texts of the files matching `pattern`, in name order (as `*.d` dirs are read)."""
    return [read_text(p) for p in sorted(glob(pattern))]


def state() -> dict[str, Any]:
    """This boot's state (kernel, page size, modules...), written by the boot step."""
    data: dict[str, Any] = read_json(STATE, {})
    if not data:
        raise Fail("sparkbase lab: node state missing (/run/sparkbase-lab/state.json)")
    return data


def faults() -> dict[str, Any]:
    """The node's injected faults (`sparkbase lab fault`)."""
    data: dict[str, Any] = read_json(FAULTS, {})
    return data


def firmware() -> dict[str, Any]:
    """The node's firmware: Secure Boot state, enrolled and pending MOK keys."""
    data: dict[str, Any] = read_json(FIRMWARE, {})
    data.setdefault("secure_boot", True)
    data.setdefault("enrolled", [])
    data.setdefault("pending", [])
    return data


def node_info() -> dict[str, Any]:
    """The node's identity (`name`, `index`), written at `lab up`."""
    data: dict[str, Any] = read_json(NODE, {"name": os.uname().nodename})
    return data


def print_err(message: str) -> None:
    """One line on stderr."""
    print(message, file=sys.stderr)


def boot_log(message: str) -> None:
    """One timestamped line in the node's boot log (`/var/lib/sparkbase-lab/boot.log`)."""
    import time

    os.makedirs(VAR, exist_ok=True)
    with open(f"{VAR}/boot.log", "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")
