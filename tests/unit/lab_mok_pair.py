"""A MOK key pair for unit tests, made once per test process the way `sparkbase lab up`
makes the lab's (the repository ships no private key)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from sparkbase_lab.mok import ensure_key_pair


@cache
def lab_mok_dir() -> Path:
    """A directory holding `MOK.der` and `MOK.priv` (a lab key), removed at exit."""
    directory = Path(tempfile.mkdtemp(prefix="sparkbase-test-mok-"))
    atexit.register(shutil.rmtree, directory, True)
    return ensure_key_pair(directory)
