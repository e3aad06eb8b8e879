"""`sparkbase adopt --lab` on the ordinary lab converged to the site baseline (this module's
own four nodes, port 3341, cloned from the run's converged image): the adopted site
validates, its inventory's fabric and rank order are the shipped inventory's (found from
the nodes' GID tables and addresses alone), one baseline holds the four identical nodes
with the values the converged nodes run, adopting twice gives the same bytes, a non-empty
DIR is refused, and no file on any node changed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleets import NODES, REPO, SITE_KERNEL, ConvergedImage, clone_fleet
from ports import port_base

from sparkbase.model.site import load_site
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

Adopted = tuple[Path, subprocess.CompletedProcess[str]]
PORT_BASE = port_base("SPARKBASE_TEST_ADOPT_PORT_BASE", 3341)
TIME = "2026-12-01T02:00:00Z"
MARK = "/run/sparkbase-test-adopt-mark"
#: where a change by adopt would land on a node (the lab's own state lives elsewhere)
WATCHED = ("/etc", "/boot", "/opt", "/usr", "/var/lib/sparkbase")


def sparkbase(*argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a separate process, as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "sparkbase.cli.main", *argv],
                          capture_output=True, text=True, check=False, timeout=600)


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under `root`: relative path -> bytes."""
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*"))
            if path.is_file()}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage) -> Iterator[Lab]:
    """The run's converged image, four nodes, marked so any later change shows."""
    for fleet_lab in clone_fleet(converged_image, tmp_path_factory.mktemp("adopt-lab"), PORT_BASE):
        for node in NODES:
            status, _out, err = fleet_lab.run(node, f"touch {MARK}")
            assert status == 0, err
        yield fleet_lab


@pytest.fixture(scope="module")
def adopted(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Adopted:
    """The site adopted from the lab."""
    out = tmp_path_factory.mktemp("adopted") / "site"
    done = sparkbase("adopt", "--lab-dir", str(lab.dir), "--out", str(out), "--time", TIME)
    return out, done


def test_adopt_writes_a_site_that_validates(adopted: Adopted) -> None:
    out, done = adopted
    assert done.returncode == 0, done.stdout + done.stderr
    checked = sparkbase("validate", "--site", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "placeholder value(s)" in checked.stdout
    # the questions name the files and lines of their placeholders
    assert "inventory/site.yaml:" in done.stdout and "(nodes.spark1.management_address)" in done.stdout
    assert "baselines/site.yaml:" in done.stdout and "(proxy)" in done.stdout


def test_the_fabric_is_found_as_the_site_cabled_it(adopted: Adopted) -> None:
    out, _done = adopted
    site, shipped = load_site(out), load_site(REPO)
    assert sorted(site.inventory.nodes) == sorted(shipped.inventory.nodes)
    for name, node in shipped.inventory.nodes.items():
        assert site.inventory.nodes[name].rank == node.rank
        assert site.inventory.nodes[name].links == node.links, name
    [baseline] = {node.baseline for node in site.inventory.nodes.values()}
    found = site.baselines[baseline]
    assert found.kernel.release == SITE_KERNEL
    assert found.fabric.ports == shipped.baselines["site-stock-6.17-4k"].fabric.ports
    assert found.fabric.gid_index == shipped.baselines["site-stock-6.17-4k"].fabric.gid_index
    assert found.nccl.settings == shipped.baselines["site-stock-6.17-4k"].nccl.settings
    assert found.sources["kernel.release"].kind == "captured"


def test_adopting_twice_gives_the_same_bytes(lab: Lab, adopted: Adopted,
                                             tmp_path: Path) -> None:
    out, _done = adopted
    again = tmp_path / "again"
    done = sparkbase("adopt", "--lab-dir", str(lab.dir), "--out", str(again), "--time", TIME)
    assert done.returncode == 0, done.stdout + done.stderr
    assert files_of(again) == files_of(out)


def test_a_non_empty_dir_is_refused(lab: Lab, adopted: Adopted) -> None:
    out, _done = adopted
    before = files_of(out)
    done = sparkbase("adopt", "--lab-dir", str(lab.dir), "--out", str(out))
    assert done.returncode == 2 and "not empty" in done.stderr
    assert files_of(out) == before


def test_nothing_on_the_nodes_changed(lab: Lab, adopted: Adopted) -> None:
    _out, done = adopted
    assert done.returncode == 0
    for node in NODES:
        find = f"find {' '.join(WATCHED)} -xdev -newer {MARK} 2>/dev/null; true"
        status, changed, err = lab.run(node, find)
        assert status == 0, err
        assert changed.split() == [], f"{node}: adopt changed {changed}"
