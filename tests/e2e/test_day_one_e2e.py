"""Day one on the fleet as the site runs it (issue 21's "done when"): this module's own
as-found lab (`lab up --as-found`, ports 3371…: set up by hand, the production lane in its
container, no sparkbase record), adopted with `sparkbase adopt --lab`, then every command an
operator runs first, each in its own process as an operator runs it:

- the adopted site validates with no placeholder for a value a node can tell; `plan` shows
  nothing to change, `audit` is clean, `preflight` of the running lane passes, naming its
  container and image;
- the lane restarted with `NCCL_IB_MERGE_NICS=1`, or from another digest, is refused,
  naming node and container;
- a stale second address on a fabric port fails the audit;
- a change that needs a reboot is refused while the container serves, and `--drain` stops
  the container on every node before any reboot.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleets import NODES, Fleet, as_found_fleet
from ports import port_base

from sparkbase_lab import as_found, faults

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_DAY_ONE_PORT_BASE", 3371)
TIME = "2026-12-03T08:00:00Z"
LANE = as_found.LANE
CONTAINER = as_found.CONTAINER
#: what a node can tell: none of these may be left a placeholder by adopt
NODE_TELLS = ("kernel.release", "kernel.page_size", "driver.version", "nccl.library", "nccl.settings",
              "fabric", "memory.sysctls", "management_address", "cpuset.cpus")


def sparkbase(*argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a separate process."""
    return subprocess.run([sys.executable, "-m", "sparkbase.cli.main", *argv],
                          capture_output=True, text=True, check=False, timeout=900)


def said(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from as_found_fleet(tmp_path_factory, "day-one", PORT_BASE)


@pytest.fixture(scope="module")
def site(found: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site `adopt` wrote for the as-found fleet."""
    out = tmp_path_factory.mktemp("day-one-site") / "site"
    done = sparkbase("adopt", "--lab-dir", str(found.lab.dir), "--out", str(out), "--time", TIME)
    assert done.returncode == 0, said(done)
    return out


def on_lab(found: Fleet, site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return sparkbase(*argv, "--site", str(site), "--lab-dir", str(found.lab.dir))


def test_the_adopted_site_validates_with_no_guess_a_node_could_answer(site: Path) -> None:
    done = sparkbase("validate", "--site", str(site))
    assert done.returncode == 0, said(done)
    placeholders = [line for line in said(done).splitlines() if "placeholder" in line and "warning" in line]
    for line in placeholders:
        assert not any(f"sources.{key}" in line for key in NODE_TELLS), line
    lane = (site / "lanes" / f"{LANE}.yaml").read_text()
    assert f"name: {CONTAINER}" in lane and "@sha256:f617afd8" in lane
    assert "endpoint: {node: spark1, port: 8000}" in lane
    baseline = next((site / "baselines").glob("adopted-*.yaml")).read_text()
    assert "managed: []" in baseline
    assert "provided_by: site" in baseline and "/opt/nccl-site/lib/libnccl.so.2.27.7" in baseline
    assert "pinned_by: container" in baseline


def test_day_one_plans_nothing_and_audits_clean(found: Fleet, site: Path) -> None:
    plan = on_lab(found, site, "plan")
    assert plan.returncode == 0, said(plan)
    assert "as found, not managed" in plan.stdout
    audit = on_lab(found, site, "audit")
    assert audit.returncode == 0, said(audit)
    assert "0 failed" in said(audit)


def test_preflight_passes_the_running_container_lane(found: Fleet, site: Path) -> None:
    done = on_lab(found, site, "preflight", LANE)
    assert done.returncode == 0, said(done)
    assert f"in container {CONTAINER}" in done.stdout and "sha256:f617afd8" in done.stdout


def test_a_container_restarted_with_merge_nics_1_is_refused(found: Fleet, site: Path) -> None:
    faults.inject(found.lab, "spark2", "container-env")
    try:
        done = on_lab(found, site, "preflight", LANE)
    finally:
        faults.clear(found.lab, "spark2", "container-env")
    assert done.returncode == 1, said(done)
    refusals = [line for line in said(done).splitlines() if line.startswith("spark2: runtime.nccl_env")]
    assert refusals and "NCCL_IB_MERGE_NICS" in refusals[0], said(done)
    assert on_lab(found, site, "preflight", LANE).returncode == 0


def test_a_container_from_another_digest_is_refused(found: Fleet, site: Path) -> None:
    faults.inject(found.lab, "spark3", "container-image")
    try:
        done = on_lab(found, site, "preflight", LANE)
    finally:
        faults.clear(found.lab, "spark3", "container-image")
    assert done.returncode == 1, said(done)
    [refusal] = [line for line in said(done).splitlines() if line.startswith("spark3: runtime.container")]
    assert f"container {CONTAINER} runs sha256:" in refusal and "lane pins sha256:f617afd8" in refusal
    assert on_lab(found, site, "preflight", LANE).returncode == 0


def test_a_stale_second_address_fails_the_audit(found: Fleet, site: Path) -> None:
    faults.inject(found.lab, "spark4", "stale-address")
    try:
        done = on_lab(found, site, "audit")
    finally:
        faults.clear(found.lab, "spark4", "stale-address")
    assert done.returncode == 1, said(done)
    failed = [line for line in said(done).splitlines() if line.startswith("spark4") and "FAIL" in line]
    assert any("fabric.link" in line and "192.168.100.4/24" in line for line in failed), said(done)
    assert on_lab(found, site, "audit").returncode == 0


def _with_kernel_managed(site: Path) -> None:
    """The operator's first decision: sparkbase manages the kernel section (its GRUB drop-in
    differs from the operator's /etc/default/grub edit: a change that needs a reboot)."""
    path = next((site / "baselines").glob("adopted-*.yaml"))
    path.write_text(path.read_text().replace("managed: []", "managed: [kernel]"))


def _container_running(found: Fleet, node: str) -> bool:
    return found.sh(node, f"docker inspect -f '{{{{.State.Running}}}}' {CONTAINER}").strip() == "true"


def test_a_reboot_is_refused_while_the_container_serves_and_drain_stops_it(found: Fleet, site: Path) -> None:
    _with_kernel_managed(site)
    plan = on_lab(found, site, "plan")
    assert "reboot" in plan.stdout, said(plan)
    refused = on_lab(found, site, "apply", "--allow-reboot", "--yes")
    assert refused.returncode == 1, said(refused)
    assert f"serves {LANE}" in said(refused)
    assert all(_container_running(found, node) for node in NODES)
    drained = on_lab(found, site, "apply", "--allow-reboot", "--drain", "--yes")
    assert drained.returncode == 0, said(drained)
    assert f"container {CONTAINER}" in said(drained)
    assert not any(_container_running(found, node) for node in NODES)
    assert on_lab(found, site, "plan").returncode == 0
