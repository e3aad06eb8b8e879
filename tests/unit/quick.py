"""How many examples a property test draws: all of them, or a sixth under `./scripts/test --quick`.

`--quick` is the inner loop (a couple of minutes); the full run, which CI makes, draws every
example. The properties are the same either way, only fewer inputs are tried.
"""

from __future__ import annotations

import os

#: the share of examples a quick run draws
QUICK_SHARE = 6


def examples(full: int) -> int:
    """`full`, or `full // QUICK_SHARE` (at least 10) when `SPARKBASE_QUICK` is set."""
    if os.environ.get("SPARKBASE_QUICK"):
        return max(10, full // QUICK_SHARE)
    return full
