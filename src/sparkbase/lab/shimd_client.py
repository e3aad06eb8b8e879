"""The node commands' C client (`shims/client.c`), built once per lab with the machine's compiler.

A node command run as `python3 -IS` costs about 14 ms of CPU, nearly all interpreter
start-up; the client hands the call to the node's resident command server
(`shims/shimd.py`) instead and costs well under a millisecond. Built at `lab up` into the
lab directory (as `preload.build` builds the preload library) and copied by
`image.install_shims` over each node's /usr/local/bin commands. Without a C compiler the
nodes keep their python wrappers.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CLIENT = "sparkbase-node-command"
SOURCE_PATH = Path(__file__).parent / "shims" / "client.c"


def build(directory: Path) -> Path | None:
    """Compile the client into `directory` (rebuilt when the source changed); None when
    the machine has no C compiler or the build fails (the nodes then keep python wrappers)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    text = SOURCE_PATH.read_text()
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "client.c"
    binary = directory / CLIENT
    if binary.is_file() and source.is_file() and source.read_text() == text:
        return binary
    source.write_text(text)
    tmp = directory / f".{CLIENT}.tmp"
    try:
        result = subprocess.run(
            [compiler, "-O2", "-Wall", "-o", str(tmp), str(source)],
            capture_output=True, text=True, timeout=120, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        return None
    tmp.replace(binary)
    return binary
