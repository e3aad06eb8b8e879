"""pyinfra inventory of the sparkbase site: `pyinfra deploys/inventory.py deploys/baseline.py -y`.

Reads the site named by $SPARKBASE_SITE (default: this repository) and, when
$SPARKBASE_LAB_DIR is set, reaches the emulated fleet through the lab's ssh_config and
known_hosts instead of the inventory's. Host keys are always checked strictly.
"""

from __future__ import annotations

from sparkbase.cli.native import inventory_hosts

#: every node of the site, as (name, host data)
sparks = inventory_hosts()
