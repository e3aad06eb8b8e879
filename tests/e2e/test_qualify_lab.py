"""The release gate on the emulated fleet (issue 22): this module's own lab (ports 3351…), a
clone of the run's converged image running the production lane's stand-in, which answers
the OpenAI-compatible API as SGLang does; the shipped prompt set, the real CLI in-process.

In order, on one lab and one site copy (each test leaves the lane running and its faults
cleared): qualify records the lane's first release; a second run against it passes with
"no difference"; the lane moved to a new build (unit `lane-dsv41-next.service`): a fault that
changes a completion fails naming that prompt; a slower build is "worse"; other traffic on
the lane gives no verdict; preflight refuses the unqualified build until it is overridden
(recorded in the decision log) or qualified.

A run whose timings drift beyond the interval and 5% of the mean is "unstable"
(qualify/stats.py); the lab's timings share two loaded cores with the rest of the suite, so
time to first token (milliseconds here) can drift that much: a test expecting a verdict runs
qualify up to twice more while the result is unstable, and says so on stderr; a third
unstable result fails it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import ConvergedImage, clone_fleet, copy_site, until_a_verdict
from ports import port_base

from sparkbase.cli.main import main
from sparkbase.model.site import load_site
from sparkbase.qualify.promptset import load_prompt_set
from sparkbase_lab import faults, lanes
from sparkbase_lab.fleet import Lab
from sparkbase_lab.shims.openai_api import changed_at

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_QUALIFY_PORT_BASE", 3351)
LANE = "dsv41-flash"
UNIT = "lane-dsv41-flash.service"
NEXT = "lane-dsv41-next.service"
#: the lane's API answers on its head node (runtime.metrics, all nodes: spark1 first)
API_NODE = "spark1"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's own copy of the shipped site (releases and the override log land here)."""
    return copy_site(tmp_path_factory.mktemp("qualify-site"))


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage,
            site: Path) -> Iterator[Lab]:
    """A converged fleet running the production lane's stand-in on every node."""
    for fleet in clone_fleet(converged_image, tmp_path_factory.mktemp("qualify-lab"), PORT_BASE):
        lanes.start(fleet, load_site(site), LANE)
        yield fleet


Result = tuple[int, dict[str, Any]]


def qualify(site: Path, lab: Lab, capsys: pytest.CaptureFixture[str], *extra: str) -> Result:
    code = main(["qualify", LANE, "--site", str(site), "--lab-dir", str(lab.dir), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def qualify_to_a_verdict(site: Path, lab: Lab, capsys: pytest.CaptureFixture[str]) -> Result:
    """qualify until a verdict (`fleets.until_a_verdict`)."""
    return until_a_verdict(lambda: qualify(site, lab, capsys))


def preflight(site: Path, lab: Lab, capsys: pytest.CaptureFixture[str], *extra: str) -> Result:
    code = main(["preflight", LANE, "--site", str(site), "--lab-dir", str(lab.dir), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def releases(site: Path) -> list[str]:
    return sorted(p.name for p in (site / "releases" / LANE).iterdir() if not p.name.startswith("."))


def test_qualify_records_the_lanes_first_release(running: Lab, site: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, result = qualify(site, running, capsys)
    assert code == 0, result["reasons"]
    assert (result["status"], result["release"], result["against"]) == ("qualified", "r1", None)
    assert result["model"] == "deepseek-ai/DeepSeek-V4.1-Flash-1017"  # what /v1/models served
    (run,) = result["runs"]
    assert run["requests"] == 16 and run["decode_tokens_per_second"]["mean"] > 0
    record = json.loads((site / "releases" / LANE / "r1" / "release.json").read_text())
    assert record["prompt_set"]["name"] == "sparkbase-v1" and len(record["completions"]) == 8
    assert record["settings"]["runtime"]["unit"] == UNIT and record["image_digest"] is None
    completions = json.loads((site / "releases" / LANE / "r1" / "completions.json").read_text())
    assert all(len(c["token_ids"]) == 256 for c in completions["completions"].values())  # SGLang's ids
    lane_file = (site / "lanes" / f"{LANE}.yaml").read_bytes()
    assert (site / "releases" / LANE / "r1" / "lane.yaml").read_bytes() == lane_file
    assert preflight(site, running, capsys)[0] == 0  # what runs is r1


def test_a_second_run_against_it_passes_with_no_difference(running: Lab, site: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, result = qualify_to_a_verdict(site, running, capsys)
    assert code == 0, result["reasons"]
    assert (result["status"], result["verdict"], result["against"], result["release"]) == (
        "qualified", "no difference", "r1", "r2")
    assert [r["label"] for r in result["runs"]] == ["A", "B", "A'"]
    assert all(r["requests"] == 16 for r in result["runs"])
    assert preflight(site, running, capsys)[0] == 0  # the lane was left running, and as qualified


def move_to_next_build(lab: Lab, site: Path) -> None:
    """The site's lane runs a new build: its own unit (the old one stays installed)."""
    if NEXT in (site / "lanes" / f"{LANE}.yaml").read_text():
        return
    lanes.stop(lab, load_site(site), LANE)
    lane = site / "lanes" / f"{LANE}.yaml"
    lane.write_text(lane.read_text().replace(f"unit: {UNIT}", f"unit: {NEXT}"))
    lanes.start(lab, load_site(site), LANE)


def test_a_build_that_changes_a_completion_fails_naming_that_prompt(
        running: Lab, site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    move_to_next_build(running, site)
    changed = [p.id for p in load_prompt_set().prompts.prompts if changed_at(p.text) is not None]
    assert changed == ["p02-list"]  # the lab's fault changes this one completion of the set
    faults.inject(running, API_NODE, "build-changes-output", NEXT)
    try:
        code, result = qualify(site, running, capsys)
    finally:
        faults.clear(running, API_NODE, "build-changes-output")
    assert (code, result["status"], result["release"]) == (1, "failed", None)
    assert [c["prompt"] for c in result["changes"]] == changed
    assert result["changes"][0]["line"].startswith("prompt p02-list: first differs at token ")
    assert result["reasons"] == ["1 completion(s) differ from release r2's"]
    assert [r["label"] for r in result["runs"]] == ["A"]  # failed before any restart to B
    assert releases(site) == ["r1", "r2"]


def test_a_slower_build_is_worse(running: Lab, site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    move_to_next_build(running, site)
    faults.inject(running, API_NODE, "build-slower", NEXT)
    try:
        code, result = qualify_to_a_verdict(site, running, capsys)
    finally:
        faults.clear(running, API_NODE, "build-slower")
    assert (code, result["status"], result["verdict"], result["release"]) == (1, "failed", "worse", None)
    decode = next(c for c in result["comparisons"] if c["figure"] == "decode tokens/s")
    assert decode["verdict"] == "worse" and decode["difference"]["high"] < -decode["bar"]
    assert releases(site) == ["r1", "r2"]


def test_other_traffic_on_the_lane_gives_no_verdict(running: Lab, site: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    move_to_next_build(running, site)
    faults.inject(running, API_NODE, "other-traffic")
    try:
        code, result = qualify(site, running, capsys)
    finally:
        faults.clear(running, API_NODE, "other-traffic")
    assert (code, result["status"], result["verdict"], result["release"]) == (1, "no verdict", None, None)
    assert result["reasons"] == ["other traffic on spark1: 2 running requests (before run A)"]
    assert releases(site) == ["r1", "r2"]


def test_preflight_refuses_the_changed_build_until_overridden_or_qualified(
        running: Lab, site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    move_to_next_build(running, site)
    code, refused = preflight(site, running, capsys)
    assert code == 1
    (refusal,) = refused["refusals"]
    assert refusal["where"] == "lane"
    assert refusal["reason"].startswith("qualification: what runs matches none of the 2 qualified release(s)")
    assert f'lane setting runtime.unit: "{NEXT}"; r2: "{UNIT}"' in refusal["reason"]
    log = site / ".sparkbase" / "overrides.log"
    code, overridden = preflight(site, running, capsys, "--override", "canary of the next build, one hour")
    assert (code, overridden["overridden"]) == (0, True)
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["kind"] == "preflight-override" and record["reason"] == "canary of the next build, one hour"
    assert record["refusals"][0].startswith("lane: qualification: what runs matches none")

    code, result = qualify_to_a_verdict(site, running, capsys)
    assert code == 0, result["reasons"]
    assert (result["status"], result["verdict"], result["release"]) == ("qualified", "no difference", "r3")
    assert result["runs"][1]["runs_as"] == f"r2: unit {UNIT}"  # B ran the previous release's build
    assert preflight(site, running, capsys)[0] == 0
