"""The glue behind the native deploy files in `deploys/` (plain `pyinfra` runs them).

The inventory module and the deploy file stay two lines each; what they need lives here,
importable and typed. Configuration comes from the environment, as pyinfra files have no
command line of their own: $SPARKBASE_SITE, $SPARKBASE_LAB_DIR, $SPARKBASE_MOK_DIR.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.context import host

from sparkbase.deploy.areas.dkms import signing_key
from sparkbase.deploy.mok_keys import mok_dir_from_env
from sparkbase.deploy.node import boot_state, mok_state, read_node, use_facts
from sparkbase.deploy.pyinfra_deploy import add_steps
from sparkbase.deploy.reads import fact_plan
from sparkbase.deploy.reboot import mok_enrolment, reboot_reasons
from sparkbase.deploy.sources import source_mirror
from sparkbase.deploy.steps import build_steps
from sparkbase.errors import ConfigError
from sparkbase.model.site import Site, load_site
from sparkbase.model.site_files import find_site_root
from sparkbase.text import shown
from sparkbase.transport import ssh_targets
from sparkbase.transport.feeds import pyinfra_host_data


@cache
def site_from_env() -> Site:
    """The site at $SPARKBASE_SITE (or the directory holding `deploys/`), loaded once."""
    root = Path(os.environ.get("SPARKBASE_SITE") or Path.cwd())
    return load_site(find_site_root(root))


def lab_from_env() -> Path | None:
    """The lab directory when $SPARKBASE_LAB_DIR is set."""
    value = os.environ.get("SPARKBASE_LAB_DIR")
    return Path(value) if value else None


def inventory_hosts() -> list[tuple[str, dict[str, Any]]]:
    """(node, pyinfra host data) for every node of the site, in rank order."""
    try:
        site = site_from_env()
        targets = ssh_targets(site, lab_from_env())
    except ConfigError as exc:
        # pyinfra would print a traceback; say what is wrong, where, and stop
        for problem in exc.problems:
            print(problem.format(Path.cwd()), file=sys.stderr)
        raise SystemExit(2) from None
    nodes = sorted(site.inventory.nodes, key=lambda n: site.inventory.nodes[n].rank)
    return [(node, pyinfra_host_data(targets[node])) for node in nodes]


def deploy_current_host() -> None:
    """Add every operation that converges the host in pyinfra's context to its baseline."""
    site = site_from_env()
    node = str(host.data.get("sparkbase_node") or host.name)
    mok_files = mok_dir_from_env(lab_from_env())
    steps = build_steps(site, node, mok_files, source_mirror(lab_from_env()))
    # pyinfra adds every host's operations before it executes any: the node is read once, first
    plan = fact_plan(steps)
    facts = read_node(plan)
    use_facts(facts, plan)
    boot, mok = boot_state(facts), mok_state(facts)
    added = add_steps(steps)
    will = [op.step for op in added if op.meta.will_change]
    baseline = site.baseline_of(node)
    signing = signing_key(baseline, mok_files)
    reasons = reboot_reasons(baseline, boot, mok, will, signing)
    if reasons:
        logger.warning(f"[{shown(host.name)}] reboot pending: {shown('; '.join(reasons))}")
    pending = mok_enrolment(baseline, mok, signing)
    if pending is not None:
        logger.warning(f"[{shown(host.name)}] {shown(pending.summary())}")
