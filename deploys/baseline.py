"""Converge each host to its sparkbase baseline (plain pyinfra deploy file).

    SPARKBASE_SITE=. pyinfra deploys/inventory.py deploys/baseline.py -y

Settings come from the site's typed baselines and the same renderer `sparkbase` uses.
Reboot-needing changes are staged and reported; `sparkbase apply --allow-reboot` rolls
reboots out one node at a time. $SPARKBASE_MOK_DIR names the MOK key pair when a
baseline signs the memory-saver module.
"""

from __future__ import annotations

from sparkbase.cli.native import deploy_current_host

deploy_current_host()
