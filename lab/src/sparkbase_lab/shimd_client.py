"""The node commands' C client (`shims/client.c`), built once per lab with the machine's compiler.

A node command run as `python3 -IS` costs about 14 ms of CPU, nearly all interpreter
start-up; the client hands the call to the node's resident command server
(`shims/shimd.py`) instead and costs about 1.5 ms, most of it starting the client
process. Built at `lab up` into the lab directory (with `cbuild.build_c`, as the preload
library is) and copied by
`image.install_shims` over each node's /usr/local/bin commands. Without a C compiler the
nodes keep their python wrappers.
"""

from __future__ import annotations

from pathlib import Path

from sparkbase_lab.cbuild import build_c

CLIENT = "sparkbase-node-command"
SOURCE_PATH = Path(__file__).parent / "shims" / "client.c"


def build(directory: Path) -> Path | None:
    """Compile the client into `directory` (rebuilt when the source changed); None when
    the machine has no C compiler or the build fails (the nodes then keep python wrappers)."""
    return build_c(directory, "client.c", SOURCE_PATH.read_text(), CLIENT)
