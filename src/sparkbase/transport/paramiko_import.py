"""paramiko, imported lightly: the one place that imports it for the whole transport.

A leaf (it imports no sparkbase module), so the client, the failure classifier and the
target checks all call it before `import paramiko` without importing each other.
"""

from __future__ import annotations

import sys
import threading
import types
from pathlib import Path

_IMPORT_LOCK = threading.Lock()
_METADATA = "importlib.metadata"


def import_paramiko() -> None:
    """Import paramiko without `invoke` (a third of paramiko's import time, asyncio and
    unittest.mock included), which paramiko needs only for ssh_config `Match exec`;
    `_ssh_config` brings it back for a config that has one. Call before `import paramiko`.

    paramiko's `__init__` asks `importlib.metadata` for its own version (it goes into the
    SSH banner), and that module (email, zipfile, csv…) costs the launch gate more than
    any other part of paramiko's import: while paramiko is imported, a stand-in answers
    from paramiko's own `*.dist-info/METADATA` beside the package, and defers to the real
    module whenever that file is not there to read unambiguously."""
    with _IMPORT_LOCK:
        if "paramiko" in sys.modules or "invoke" in sys.modules:
            return
        sys.modules["invoke"] = None  # type: ignore[assignment]  # import blocker
        stand_in = _METADATA not in sys.modules
        if stand_in:
            sys.modules[_METADATA] = _metadata_stand_in()
        try:
            import paramiko  # noqa: F401  # imported for its side effect on sys.modules
        finally:
            del sys.modules["invoke"]
            if stand_in and isinstance(sys.modules.get(_METADATA), _VersionOnly):
                del sys.modules[_METADATA]


class _VersionOnly(types.ModuleType):
    """The part of `importlib.metadata` paramiko's import uses: `version(name)`."""

    @staticmethod
    def version(name: str) -> str:
        """The version of the installed distribution `name`, as `importlib.metadata` gives it."""
        return installed_version(name)


def _metadata_stand_in() -> types.ModuleType:
    return _VersionOnly(_METADATA, "answers `version()` while paramiko is imported")


def installed_version(name: str) -> str:
    """The `Version:` of the one `<name>-*.dist-info` beside the package `name` (a wheel's
    install); anything else (no such directory, several, an editable or egg install, no
    Version line) asks the real `importlib.metadata`."""
    from importlib.util import find_spec

    spec = find_spec(name)
    origin = spec.origin if spec is not None else None
    if origin is not None:
        found = sorted(Path(origin).parent.parent.glob(f"{name}-*.dist-info/METADATA"))
        version = metadata_version(found[0], name) if len(found) == 1 else None
        if version is not None:
            return version
    return _real_version(name)


def metadata_version(path: Path, name: str) -> str | None:
    """`Version:` of the core metadata file `path` when its `Name:` is `name`, else None."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    headers: dict[str, str] = {}
    for line in text.split("\n"):
        if not line.strip():
            break  # the headers end at the first blank line (the description follows)
        key, colon, value = line.partition(":")
        if colon and not key.startswith((" ", "\t")):
            headers.setdefault(key.strip().lower(), value.strip())
    if headers.get("name", "").lower() != name.lower():
        return None
    return headers.get("version") or None


def _real_version(name: str) -> str:
    """`importlib.metadata.version(name)`, from the real module, which from then on replaces
    the stand-in."""
    if isinstance(sys.modules.get(_METADATA), _VersionOnly):
        del sys.modules[_METADATA]
    from importlib import metadata

    return metadata.version(name)
