"""The release gate on a lane run as a container alone (issue 22), on the fleet as the site
runs it: this module's own as-found lab (ports 3381…; `lab up --as-found`: the production
lane as the container dsv41-flash on every node, run by hand), adopted with `sparkbase
adopt`, then qualify run by the real CLI in-process against the lab's real sshd and docker
stand-in.

In order: qualify records the lane's first release (determinism only; nothing restarted);
the operator moves every node's container to the next image (the `container-image` fault:
`docker rm` and `docker run` as they would) and the lane file follows; a slower next build
is judged "worse" by an A/B/A in which B ran the previous release's image under the lane's
name with the site container's own options, and the site's container, its ID unchanged, is
left running the candidate with nothing of sparkbase's left on any node; a comparison cut
short (sparkbase's container left running release r1's image, the site's held) is put back by
the next qualify before it judges anything.

The lab's timings share two loaded cores with the rest of the suite: a run expecting a
verdict runs again up to twice while the result is "unstable" (as test_qualify_lab.py does).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import Fleet, as_found_fleet, until_a_verdict
from ports import port_base

from sparkbase.cli.main import main
from sparkbase.qualify.restart import HELD_SUFFIX, HOLDS_LABEL
from sparkbase_lab import faults
from sparkbase_lab.shims import docker_images

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_QUALIFY_CONTAINERS_PORT_BASE", 3381)
LANE = "dsv41-flash"
NODES = ["spark1", "spark2", "spark3", "spark4"]
TIME = "2026-12-03T12:00:00Z"
NEXT_BUILD = docker_images.build_of(str(docker_images.find(docker_images.NEXT_REFERENCE)["id"]))  # type: ignore[index]

Result = tuple[int, dict[str, Any]]


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from as_found_fleet(tmp_path_factory, "qualify-containers", PORT_BASE)


@pytest.fixture(scope="module")
def site(found: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site `adopt` wrote for the as-found fleet."""
    out = tmp_path_factory.mktemp("qualify-containers-site") / "site"
    argv = ["adopt", "--lab-dir", str(found.lab.dir), "--out", str(out), "--time", TIME]
    done = subprocess.run([sys.executable, "-m", "sparkbase.cli.main", *argv], capture_output=True, text=True,
                          check=False, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def qualify(found: Fleet, site: Path, capsys: pytest.CaptureFixture[str]) -> Result:
    code = main(["qualify", LANE, "--site", str(site), "--lab-dir", str(found.lab.dir), "--json"])
    captured = capsys.readouterr()
    print(captured.err, file=sys.stderr)
    return code, json.loads(captured.out)


def qualify_to_a_verdict(found: Fleet, site: Path, capsys: pytest.CaptureFixture[str]) -> Result:
    """qualify until a verdict (`fleets.until_a_verdict`)."""
    return until_a_verdict(lambda: qualify(found, site, capsys))


def containers(found: Fleet, node: str) -> dict[str, dict[str, Any]]:
    """Every container on the node (`docker ps -a`, then `docker inspect` of each), by name."""
    status, out, err = found.lab.run(node, "docker inspect $(docker ps -aq --no-trunc)", timeout=60)
    assert status == 0, err
    return {d["Name"].lstrip("/"): d for d in json.loads(out)}


def test_qualify_records_the_container_lanes_first_release(found: Fleet, site: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    before = {node: containers(found, node)[LANE]["Id"] for node in NODES}
    code, result = qualify(found, site, capsys)
    assert code == 0, result["reasons"]
    assert (result["status"], result["release"], result["against"]) == ("qualified", "r1", None)
    record = json.loads((site / "releases" / LANE / "r1" / "release.json").read_text())
    assert record["image_digest"] == docker_images.PRODUCTION_DIGEST
    assert {node: containers(found, node)[LANE]["Id"] for node in NODES} == before  # nothing restarted


def move_to_the_next_image(found: Fleet, site: Path) -> None:
    """Every node's container run again from the next image, the lane file following."""
    lane = site / "lanes" / f"{LANE}.yaml"
    if docker_images.NEXT_DIGEST in lane.read_text():
        return
    for node in NODES:
        faults.inject(found.lab, node, "container-image")
    lane.write_text(lane.read_text().replace(docker_images.PRODUCTION_DIGEST, docker_images.NEXT_DIGEST))


def test_a_slower_next_image_is_worse_and_the_sites_container_is_left_as_it_ran(
        found: Fleet, site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    move_to_the_next_image(found, site)
    before = {node: containers(found, node)[LANE]["Id"] for node in NODES}
    faults.inject(found.lab, "spark1", "build-slower", NEXT_BUILD)
    try:
        code, result = qualify_to_a_verdict(found, site, capsys)
    finally:
        faults.clear(found.lab, "spark1", "build-slower")
    assert (code, result["status"], result["verdict"], result["against"]) == (1, "failed", "worse", "r1"), \
        result["reasons"]
    runs_as = [run["runs_as"] for run in result["runs"]]
    assert runs_as == [f"candidate: container {LANE} from {docker_images.NEXT_DIGEST[:19]}",
                       f"r1: container {LANE} from {docker_images.PRODUCTION_DIGEST[:19]}",
                       f"candidate: container {LANE} from {docker_images.NEXT_DIGEST[:19]}"]
    for node in NODES:
        left = containers(found, node)
        assert list(left) == [LANE], f"{node}: {sorted(left)}"
        assert left[LANE]["Id"] == before[node] and left[LANE]["State"]["Running"] is True
        assert left[LANE]["Config"]["Image"] == docker_images.NEXT_REFERENCE


def test_a_comparison_cut_short_is_put_back_before_the_next_run(found: Fleet, site: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """spark2 left as a killed session leaves it: the site's container stopped and held, a
    labelled container running release r1's image under the lane's name."""
    move_to_the_next_image(found, site)
    site_container = containers(found, "spark2")[LANE]
    held = LANE + HELD_SUFFIX
    argv = ["docker", "run", "-d", "--name", LANE, "--network", "host", "--label",
            f"{HOLDS_LABEL}={site_container['Id']}", docker_images.PRODUCTION_REFERENCE, "sleep", "600"]
    pull = f"docker pull -q {shlex.quote(docker_images.PRODUCTION_REFERENCE)} >/dev/null"
    script = f"docker stop {LANE} >/dev/null && docker rename {LANE} {held} && {pull} && {shlex.join(argv)}"
    status, _out, err = found.lab.run("spark2", script, timeout=120)
    assert status == 0, err
    code, result = qualify_to_a_verdict(found, site, capsys)
    assert code == 0, result["reasons"]
    assert (result["status"], result["verdict"], result["release"]) == ("qualified", "no difference", "r2")
    left = containers(found, "spark2")
    assert list(left) == [LANE] and left[LANE]["Id"] == site_container["Id"]
    assert left[LANE]["State"]["Running"] is True
