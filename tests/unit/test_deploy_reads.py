"""What plan and apply read of a node: one `FactPlan` from the node's steps (`deploy/reads.py`),
for every step a baseline can have. That it is all the operations then read is checked by
running them (the unit cases and the e2e deploys: an operation reading a path or unit the plan
did not ask for fails with a KeyError)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lab_mok_pair import lab_mok_dir
from pyinfra.api.config import Config
from pyinfra.api.inventory import Inventory
from pyinfra.api.state import State
from pyinfra.context import ctx_host, ctx_state

from sparkbase.deploy import node
from sparkbase.deploy.areas.files import File, FileRetire, Upload
from sparkbase.deploy.areas.memory import FactorySwapRestore, SwapRetire
from sparkbase.deploy.areas.units import UnitDisabled, UnitEnabled, UnitRetire
from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.kinds import Step, Writes
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.reads import fact_plan
from sparkbase.deploy.reboot import STAGED_PATH
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.areas import section_names
from sparkbase.facts.assemble import assemble
from sparkbase.facts.model import InitramfsCopy, NetplanListing, NodeFacts
from sparkbase.facts.parsers.memory import FSTAB
from sparkbase.facts.script import FactPlan, Sections
from sparkbase.model.ownership import OwnershipRecord
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
    files = [s.args.path for s in steps if isinstance(s.args, File)]
    uploads = [s.args.path for s in steps if isinstance(s.args, Upload)]
    assert set(files + uploads) <= set(plan.file_states)
    assert set(files) <= set(plan.file_texts)
    # an upload (the MOK key pair) is judged by its sha256 alone: its text is never read
    assert not set(uploads) & set(plan.file_texts)
    assert not [s for s in steps if s.secret and getattr(s.args, "path", None) in plan.file_texts]
    assert plan.ownership and plan.mok_keys and plan.staged_path == STAGED_PATH
    units = {s.args.unit for s in steps
             if isinstance(s.args, UnitEnabled | UnitDisabled | UnitRetire)}
    assert units <= set(plan.units)
    names = section_names(plan)
    assert {"uname", "pagesize", "sb-state", "mok-enrolled", "ownership", "held", "swapon"} <= names
    assert len(plan.file_states) == len(set(plan.file_states))  # each path read once


def test_the_fstab_editors_read_fstab_whole_and_each_path_once() -> None:
    steps = [Step(SwapRetire(path="/swapfile"), "retire /swapfile", section="memory"),
             Step(FactorySwapRestore(path="/swap.img"), "restore", section="memory"),
             Step(FileRetire(path="/etc/x.conf"), "retire", section="host"),
             Step(File(path="/etc/x.conf", content="", mode=0o644), "x", section="host")]
    plan = fact_plan(steps)
    assert plan.file_texts == (FSTAB, "/etc/x.conf")
    assert plan.file_states == (FSTAB, "/etc/x.conf")
    assert plan.swap_files == ("/swapfile",)


class FakeHost:
    """A host as the read keeps it: its name and its operations in order."""

    name = "spark1"
    op_hash_order = ("a", "b")


class Meta:
    """An operation's result as pyinfra keeps it: complete or not, changed or not."""

    def __init__(self, complete: bool, changed: bool) -> None:
        self.complete, self.changed = complete, changed

    def is_complete(self) -> bool:
        return self.complete

    def did_change(self) -> bool:
        return self.changed


def test_executing_operations_read_the_node_again_only_after_a_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While operations are added they all see the facts read first; while they execute, the
    node is read again once (and only once) after an operation changed it."""
    metas = {"a": Meta(False, False), "b": Meta(False, False)}
    host = FakeHost()
    state = SimpleNamespace(is_executing=False,
                            get_op_data_for_host=lambda h, op: SimpleNamespace(operation_meta=metas[op]))
    plan = FactPlan(core_only=True, initramfs=(("7.0", "/etc/m.conf"),))
    first = NodeFacts("spark1", containers={}, kernel_release="old",
                      initramfs={("7.0", "/etc/m.conf"): InitramfsCopy(True, "c" * 64)})
    reads: list[FactPlan] = []

    def read(asked: FactPlan) -> NodeFacts:
        reads.append(asked)
        return NodeFacts("spark1", containers={}, kernel_release=f"read {len(reads)}")

    monkeypatch.setattr(node, "read_node", read)
    old_state, old_host = ctx_state.get(), ctx_host.get()  # type: ignore[no-untyped-call]
    try:
        with ctx_state.use(state), ctx_host.use(host):
            node.use_facts(first, plan)
            assert node.node_facts() is first
            state.is_executing = True
            metas["a"] = Meta(True, False)  # executed, changed nothing
            assert node.node_facts() is first and reads == []
            metas["a"] = Meta(True, True)
            again = node.node_facts()
            assert again.kernel_release == "read 1" and node.node_facts() is again
            # the initramfs is not unpacked again: its copy as first read is kept
            assert reads == [FactPlan(core_only=True)] and again.initramfs == first.initramfs
    finally:
        ctx_state.set(old_state)  # type: ignore[no-untyped-call]
        ctx_host.set(old_host)  # type: ignore[no-untyped-call]


#: pyinfra's own operation reads its own facts (`files.line` of /etc/fstab)
PYINFRAS_OWN = {"fstab-line", "fstab-line-absent"}


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_every_operation_finds_what_it_reads_in_the_one_read(site: Site, case_file: Path) -> None:
    """Each step's operation, added on a node read by the plan of its steps (here a node that
    answered nothing: every value empty), finds every path, unit, kernel and tree it reads
    in that read: no operation reads the node any other way."""
    case = json.loads(case_file.read_text())
    if case["baseline"]:
        site = with_assignment(site, [case["node"]], case["baseline"])
    steps = build_steps(site, case["node"], MokFiles.from_dir(lab_mok_dir()) if case["mok"] else None)
    plan = fact_plan(steps)
    facts = replace(assemble(case["node"], plan, Sections()), ownership=OwnershipRecord(),
                    netplan_files=NetplanListing(), containers={})
    inventory = Inventory(([case["node"]], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    host = inventory.get_host(case["node"])
    added = 0
    with ctx_state.use(state), ctx_host.use(host):
        node.use_facts(facts, plan)
        by_path: dict[str, Any] = {}
        for step in steps:
            if step.kind in PYINFRAS_OWN:
                continue
            meta = step.args.add(step.name, by_path.get(step.after_change_of or ""))
            if isinstance(step.args, Writes):
                by_path[step.args.path] = meta
            added += 1
    assert added >= 20
