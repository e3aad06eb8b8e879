"""Which facts a prepare reads in its batch: every operation says its own (`ASKS`, next to
the operation), for every step a baseline can have. That they are exactly what the
operations then ask is checked against the lab (tests/e2e/test_fact_batch_e2e.py: no fact is
read on its own while a factory or a converged node is planned)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_mok_pair import lab_mok_dir

from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.facts import BootState, FileState, FileText, MokState
from sparkbase.deploy.kinds import KINDS, File, Upload
from sparkbase.deploy.pyinfra_deploy import ASKS, asks_for
from sparkbase.deploy.steps import MokFiles, build_steps
from sparkbase.model.site import Site, load_site

REPO = Path(__file__).resolve().parents[2]
CASES = sorted((Path(__file__).parent / "deploy_cases").glob("*.json"))


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


def test_every_step_kind_says_what_its_operation_reads() -> None:
    assert set(ASKS) == set(KINDS)


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_the_asks_of_every_deploy_case(site: Site, case_file: Path) -> None:
    case = json.loads(case_file.read_text())
    if case["baseline"]:
        site = with_assignment(site, [case["node"]], case["baseline"])
    steps = build_steps(site, case["node"], MokFiles.from_dir(lab_mok_dir()) if case["mok"] else None)
    asks = asks_for(steps)
    assert [ask.cls for ask in asks[:2]] == [BootState, MokState]
    assert all(ask.batchable() for ask in asks)
    files = [s.args.path for s in steps if isinstance(s.args, File)]
    uploads = [s.args.path for s in steps if isinstance(s.args, Upload)]
    read = {(ask.cls, dict(ask.kwargs).get("path")) for ask in asks}
    assert {(FileState, path) for path in files + uploads} <= read
    assert {(FileText, path) for path in files} <= read
    # an upload (the MOK key pair) is judged by its sha256 alone: its text is never read
    assert not {(FileText, path) for path in uploads} & read
    assert len({ask.key() for ask in asks}) < len(asks)  # repeats, read once by the memo
