"""What plan and apply read of a node: one `FactPlan` from the node's steps (`deploy/reads.py`),
for every step a baseline can have. That it is all the operations then read is checked by
running them (the unit cases and the e2e deploys: an operation reading a path or unit the plan
did not ask for fails with a KeyError)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_mok_pair import lab_mok_dir

from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.reads import fact_plan
from sparkbase.deploy.reboot import STAGED_PATH
from sparkbase.deploy.steps import MokFiles, Step, build_steps
from sparkbase.facts.script import FSTAB, section_names
from sparkbase.model.site import Site, load_site

REPO = Path(__file__).resolve().parents[2]
CASES = sorted((Path(__file__).parent / "deploy_cases").glob("*.json"))


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_the_read_of_every_deploy_case(site: Site, case_file: Path) -> None:
    case = json.loads(case_file.read_text())
    if case["baseline"]:
        site = with_assignment(site, [case["node"]], case["baseline"])
    steps = build_steps(site, case["node"], MokFiles.from_dir(lab_mok_dir()) if case["mok"] else None)
    plan = fact_plan(steps)
    files = [str(s.args["path"]) for s in steps if s.kind == "file"]
    uploads = [str(s.args["path"]) for s in steps if s.kind == "upload"]
    assert set(files + uploads) <= set(plan.file_states)
    assert set(files) <= set(plan.file_texts)
    # an upload (the MOK key pair) is judged by its sha256 alone: its text is never read
    assert not set(uploads) & set(plan.file_texts)
    assert not [s for s in steps if s.secret and str(s.args.get("path")) in plan.file_texts]
    assert plan.ownership and plan.mok_keys and plan.staged_path == STAGED_PATH
    units = {str(s.args["unit"]) for s in steps if s.kind in ("unit-enabled", "unit-disabled", "unit-retire")}
    assert units <= set(plan.units)
    names = section_names(plan)
    assert {"uname", "pagesize", "sb-state", "mok-enrolled", "ownership", "held", "swapon"} <= names
    assert len(plan.file_states) == len(set(plan.file_states))  # each path read once


def test_the_fstab_editors_read_fstab_whole_and_each_path_once() -> None:
    steps = [Step("swap-retire", "retire /swapfile", {"path": "/swapfile"}, section="memory"),
             Step("factory-swap-restore", "restore", {"path": "/swap.img"}, section="memory"),
             Step("file-retire", "retire", {"path": "/etc/x.conf"}, section="host"),
             Step("file", "x", {"path": "/etc/x.conf", "content": "", "mode": 0o644}, section="host")]
    plan = fact_plan(steps)
    assert plan.file_texts == (FSTAB, "/etc/x.conf")
    assert plan.file_states == (FSTAB, "/etc/x.conf")
    assert plan.swap_files == ("/swapfile",)
