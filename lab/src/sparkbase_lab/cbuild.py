"""Build a small C program or library for the lab with the machine's compiler.

The lab builds two: the preload library (`preload.py`) and the node commands' client
(`shimd_client.py`). Each is rebuilt only when its source changed; without a C compiler, or
when the build fails, the lab runs without it (the callers say what they fall back to).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path


def build_c(directory: Path, source_name: str, source: str, output: str,
            flags: Sequence[str] = (), libraries: Sequence[str] = ()) -> Path | None:
    """Compile `source` (kept as `directory/source_name`) into `directory/output`; the
    existing output when the kept source is the same; None without a compiler or when the
    build fails. The output is written under a temporary name and renamed into place."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    kept = directory / source_name
    target = directory / output
    if target.is_file() and kept.is_file() and kept.read_text() == source:
        return target
    kept.write_text(source)
    tmp = directory / f".{output}.tmp"
    try:
        result = subprocess.run(
            [compiler, *flags, "-O2", "-Wall", "-o", str(tmp), str(kept), *libraries],
            capture_output=True, text=True, timeout=120, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        return None
    tmp.replace(target)
    return target
