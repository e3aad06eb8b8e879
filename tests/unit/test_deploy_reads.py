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

from sparkbase.deploy import kinds, node
from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.kinds import Writes
from sparkbase.deploy.reads import fact_plan
from sparkbase.deploy.reboot import STAGED_PATH
from sparkbase.deploy.steps import MokFiles, Step, build_steps
from sparkbase.facts.assemble import assemble
from sparkbase.facts.model import InitramfsCopy, NetplanListing, NodeFacts
from sparkbase.facts.script import FSTAB, FactPlan, Sections, section_names
from sparkbase.model.site import Site, load_site
from sparkbase.policy.ownership import OwnershipRecord

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
    files = [s.args.path for s in steps if isinstance(s.args, kinds.File)]
    uploads = [s.args.path for s in steps if isinstance(s.args, kinds.Upload)]
    assert set(files + uploads) <= set(plan.file_states)
    assert set(files) <= set(plan.file_texts)
    # an upload (the MOK key pair) is judged by its sha256 alone: its text is never read
    assert not set(uploads) & set(plan.file_texts)
    assert not [s for s in steps if s.secret and getattr(s.args, "path", None) in plan.file_texts]
    assert plan.ownership and plan.mok_keys and plan.staged_path == STAGED_PATH
    units = {s.args.unit for s in steps
             if isinstance(s.args, kinds.UnitEnabled | kinds.UnitDisabled | kinds.UnitRetire)}
    assert units <= set(plan.units)
    names = section_names(plan)
    assert {"uname", "pagesize", "sb-state", "mok-enrolled", "ownership", "held", "swapon"} <= names
    assert len(plan.file_states) == len(set(plan.file_states))  # each path read once


def test_the_fstab_editors_read_fstab_whole_and_each_path_once() -> None:
    steps = [Step(kinds.SwapRetire(path="/swapfile"), "retire /swapfile", section="memory"),
             Step(kinds.FactorySwapRestore(path="/swap.img"), "restore", section="memory"),
             Step(kinds.FileRetire(path="/etc/x.conf"), "retire", section="host"),
             Step(kinds.File(path="/etc/x.conf", content="", mode=0o644), "x", section="host")]
    plan = fact_plan(steps)
    assert plan.file_texts == (FSTAB, "/etc/x.conf")
    assert plan.file_states == (FSTAB, "/etc/x.conf")
    assert plan.swap_files == ("/swapfile",)


class FakeHost:
    """A host as the read keeps it: its name and its operations in order."""

    name = "spark1"
    op_hash_order = ("a", "b")
    executing_op_hash: str | None = None


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


def test_an_executing_operation_reads_again_what_its_own_step_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a change, an operation registered with its step's plan (`reads_again`) reads
    that plan, once per change; one not registered reads the whole plan, which then serves all."""
    metas = {"a": Meta(True, True), "b": Meta(False, False)}
    host = FakeHost()
    state = SimpleNamespace(is_executing=False,
                            get_op_data_for_host=lambda h, op: SimpleNamespace(operation_meta=metas[op]))
    whole = FactPlan(core_only=True, units=("a.service", "b.service"))
    own = FactPlan(core_only=True, units=("b.service",))
    reads: list[FactPlan] = []

    def read(asked: FactPlan) -> NodeFacts:
        reads.append(asked)
        return NodeFacts("spark1", containers={})

    monkeypatch.setattr(node, "read_node", read)
    old_state, old_host = ctx_state.get(), ctx_host.get()  # type: ignore[no-untyped-call]
    try:
        with ctx_state.use(state), ctx_host.use(host):
            node.use_facts(NodeFacts("spark1", containers={}), whole)
            node.reads_again(SimpleNamespace(_hash="b"), own)  # type: ignore[arg-type]
            state.is_executing = True
            host.executing_op_hash = "b"
            node.node_facts()
            node.node_facts()
            assert reads == [own]
            host.executing_op_hash = "c"  # no step registered it
            node.node_facts()
            host.executing_op_hash = "b"
            node.node_facts()
            assert reads == [own, whole]
            metas["b"] = Meta(True, True)  # a second change: read again
            node.node_facts()
            assert reads == [own, whole, own]
    finally:
        ctx_state.set(old_state)  # type: ignore[no-untyped-call]
        ctx_host.set(old_host)  # type: ignore[no-untyped-call]


def test_a_read_again_keeps_what_other_steps_read() -> None:
    """What one step's plan asked is taken from the new read (an entry now missing is gone);
    other steps' entries, the netplan listing and errors of other sections are kept."""
    old = NodeFacts("spark1", containers={}, kernel_release="old",
                    packages={"a": "1", "b": "1"}, file_states={"/etc/x": None, "/etc/y": None},
                    netplan_files=NetplanListing(), errors={"dpkg": "timed out", "swapon": "no"})
    fresh = NodeFacts("spark1", containers={}, kernel_release="new", packages={}, errors={})
    plan = FactPlan(packages=("a",), file_states=("/etc/x",))
    merged = node.refreshed(old, fresh, plan)
    assert merged.kernel_release == "new"
    assert merged.packages == {"b": "1"}
    assert merged.file_states == {"/etc/y": None}
    assert merged.netplan_files == NetplanListing()
    assert "dpkg" not in merged.errors and merged.errors["swapon"] == "no"


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_every_operation_finds_what_it_reads_in_its_own_steps_read(site: Site, case_file: Path) -> None:
    """Each step's operation, added alone on a node read by its own step's plan (what it reads
    again while executing), finds every path, unit, kernel and tree it reads there: no step
    reads what only another step declared, so none decides on an entry left from before."""
    case = json.loads(case_file.read_text())
    if case["baseline"]:
        site = with_assignment(site, [case["node"]], case["baseline"])
    steps = build_steps(site, case["node"], MokFiles.from_dir(lab_mok_dir()) if case["mok"] else None)
    inventory = Inventory(([case["node"]], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    host = inventory.get_host(case["node"])
    with ctx_state.use(state), ctx_host.use(host):
        for step in steps:
            if step.kind in PYINFRAS_OWN:
                continue
            plan = fact_plan([step])
            facts = replace(assemble(case["node"], plan, Sections()), ownership=OwnershipRecord(),
                            netplan_files=NetplanListing(), containers={})
            node.use_facts(facts, plan)
            step.args.add(step.name, None)


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
