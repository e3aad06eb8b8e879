"""The entry every node command goes through: `shim.py COMMAND ARGS...` (inside the node).

Copied to `/usr/local/lib/sparkbase-lab/shim.py`, next to the `sparkbase_lab/...` package
copy it imports; node init runs `python3 -IS shim.py __boot__`, and each wrapper in
`/usr/local/bin` does the same with its own name.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sparkbase_lab.shims.registry import main

    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:]))
