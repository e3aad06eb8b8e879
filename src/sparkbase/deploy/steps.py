"""From a node's baseline to the ordered list of things the deploy must ensure: `build_steps`
calls each area's builder (`sparkbase.deploy.areas`) in the one order the deploy runs. It
needs no host and loads no pyinfra, so the whole order is tested as data
(`tests/unit/deploy_cases/`). Every setting comes from the typed baseline and the renderer.

Every step belongs to one section of the baseline (`Step.section`, `sparkbase.model.sections`),
the stamp alone to none (sparkbase's own record, written when the baseline manages anything).
The steps of a section left as found are not built, its retire steps included: sparkbase never
writes, installs, removes or restarts anything there.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sparkbase.deploy.areas import (
    cpuset,
    dkms,
    fabric,
    files,
    host,
    kernel,
    memory,
    packages,
    secure_boot,
    units,
)
from sparkbase.deploy.kinds import Recorded, Step
from sparkbase.policy.foreign import foreign_for
from sparkbase.render import STAMP_PATH, fabric_ethernets, node_files, node_paths

if TYPE_CHECKING:
    from sparkbase.deploy.mok_keys import MokFiles
    from sparkbase.model.site import Site


def build_steps(site: Site, node: str, mok: MokFiles | None = None, mirror: str | None = None) -> list[Step]:
    """Every step that converges `node` to its baseline, in the order they must run: only
    those of the sections the baseline manages (the stamp when it manages any). DKMS source
    tarballs are fetched from `mirror` (a URL prefix), else from the repository host."""
    name = site.inventory.nodes[node].baseline
    baseline = site.baselines[name]
    rendered = node_files(site, node)  # only the managed sections' files, the stamp last
    foreign = foreign_for(site, name)  # only in sections this baseline manages
    ethernets = fabric_ethernets(baseline, node_paths(site, node))
    steps = [
        *packages.package_steps(baseline),
        # retire what other baselines put on the node and sparkbase recorded creating (what it
        # did not create, or what changed since, is kept and reported), in sections this one
        # manages: services first (while their unit file exists), DKMS builds before their
        # source package, packages of another kernel only once this baseline's kernel runs
        *units.retire_units(foreign),
        *dkms.retire_dkms(foreign),
        *files.retire_files(foreign),
        *memory.retire_boot_swap(foreign.boot_swap),
        *packages.retire_packages(foreign, baseline.kernel.release),
        *secure_boot.retire_mok(foreign),
        *secure_boot.mok_steps(baseline, mok),
        *dkms.dkms_steps(baseline, mok, mirror),
        fabric.netplan_files_step(baseline),
        *(fabric.takeover_step(f, ethernets) if f.merged else files.file_step(f)
          for f in rendered if f.path != STAMP_PATH),
        *host.modeset_steps(foreign, baseline),
        # what makes the files take effect without a reboot (or stages it for one), each decided
        # from the node's state as well as from its file changing in this run, so a run cut
        # short after a file was written is finished by the next one
        kernel.grub_update_step(baseline),
        memory.sysctl_step(baseline),
        *cpuset.slice_steps(baseline),
        fabric.netplan_apply_step(baseline, site.inventory.nodes[node].addresses()),
        host.initramfs_step(baseline, rendered),
        *memory.swap_steps(site, baseline),
        memory.thp_step(baseline),
        *host.service_steps(baseline),
        *(files.file_step(f) for f in rendered if f.path == STAMP_PATH),
    ]
    built = [step for step in steps if step.section is None or baseline.manages(step.section)]
    return [_recorded_as(step, name) for step in built]


def _recorded_as(step: Step, baseline: str) -> Step:
    """The step, telling its operation which baseline to record what it creates under (when
    it records: `kinds.Recorded`)."""
    if not isinstance(step.args, Recorded):
        return step
    return dataclasses.replace(step, args=dataclasses.replace(step.args, baseline=baseline))
