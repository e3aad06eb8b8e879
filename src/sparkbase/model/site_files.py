"""Where a site's files are: its root, its inventory, the directories the loader reads.

Light on purpose (no typed model, no YAML): the launch gate finds a site and computes its
cache key from these before it knows whether it must load the site at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkbase.errors import ConfigError, Problem

SITE_RULES_FILE = "site.yaml"
DEFAULT_INVENTORY = Path("inventory") / "site.yaml"
#: the directories whose every file the loader lists or reads (and the cache key covers)
SITE_DIRECTORIES = ("baselines", "lanes")


def find_site_root(start: Path) -> Path:
    """The site directory: `start`, or the nearest parent holding baselines/site.yaml."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if os.path.lexists(candidate / "baselines" / SITE_RULES_FILE):  # the loader checks its type
            return candidate
    raise ConfigError(
        [
            Problem(
                start / "baselines" / SITE_RULES_FILE,
                1,
                1,
                "",
                "no site here: expected baselines/site.yaml in this directory or a parent (pass --site DIR)",
            )
        ]
    )


def inventory_file(root: Path, inventory: Path | None) -> Path:
    """The inventory file of the site at `root` (resolved): `inventory`, else the default."""
    return Path(os.path.abspath(root / (inventory or DEFAULT_INVENTORY)))
