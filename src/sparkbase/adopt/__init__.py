"""`sparkbase adopt`: a complete site written from a fleet as it runs (pure core).

From each node's facts (one round trip each, `baselines.adopt_plan`), `adopt_site` finds
the fabric (`fabric`), the serving engines (`lanes`) and the groups of identical nodes
(`baselines`), and writes the site's files as text (`writing`): the inventory, one baseline
per group (plus the starter baselines it extends), the site contract and one lane file per
engine, with the ssh_config and known_hosts the nodes were reached with. Every value comes
from a node (`captured`, node and time) or from the starter with its own source; what no
node can tell is a placeholder and a `Question` at its FILE:LINE. The same facts and time
give the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from sparkbase.adopt.baselines import (
    ADOPTED_VERSION,
    Group,
    baseline_text,
    group_nodes,
    node_reading,
)
from sparkbase.adopt.fabric import Fabric, RankOrder, discover, rank_order
from sparkbase.adopt.lanes import FoundLane, find_lanes, lanes_on
from sparkbase.adopt.writing import Question, inventory_text, lane_text, line_of, shape_name, site_rules_text
from sparkbase.facts.model import NodeFacts
from sparkbase.model.baseline import Baseline

T = TypeVar("T")


@dataclass(frozen=True)
class Starter:
    """What adopt starts from: the starter's site baseline (the template: what to read, and
    every value a node cannot tell), the files it extends, and the site contract."""

    template: Baseline
    template_text: str
    #: the baselines the template extends, file name -> text (copied as they are)
    ancestors: dict[str, str]
    site_rules: str


@dataclass(frozen=True)
class Adopted:
    """The adopted site: its files (relative POSIX path -> text), the questions it leaves,
    and what could not be put together (sentences)."""

    files: dict[str, str]
    questions: tuple[Question, ...]
    notes: tuple[str, ...]
    groups: tuple[Group, ...] = ()
    lanes: tuple[FoundLane, ...] = ()
    order: RankOrder | None = None
    fabric: Fabric | None = field(default=None, compare=False)


def management_address(facts: NodeFacts, interface: str) -> str | None:
    """The first IPv4 address of `interface` (the NCCL bootstrap interface: the management
    NIC), without its prefix."""
    found = facts.interfaces.get(interface)
    return found.addresses[0].split("/")[0] if found is not None and found.addresses else None


def _captured(group: Group, key: str, default: T) -> T:
    """The value the group's nodes gave for `key`, when it is of `default`'s type; else `default`."""
    value = next((v.value for v in group.reading.capture.values if v.key == key), None)
    return value if isinstance(value, type(default)) else default


def adopt_site(facts: Mapping[str, NodeFacts], starter: Starter, time: str,
               ssh_files: Mapping[str, str]) -> Adopted:
    """The site the nodes of `facts` make (pure): files, questions, notes.

    `time` is when the nodes were read (ISO-8601 UTC); it appears only in `sources:`.
    `ssh_files` are the ssh_config and known_hosts (inventory/ paths -> text) to copy.
    """
    notes: list[str] = []
    fabric = discover(facts)
    notes += fabric.notes
    order = rank_order(list(facts), fabric)
    lanes = find_lanes(facts, order.nodes)
    readings = {node: node_reading(facts[node], starter.template, fabric.nodes.get(node),
                                   lanes_on(lanes, node), notes) for node in order.nodes}
    groups = group_nodes(readings, order.nodes)
    for group in groups:
        for item in group.reading.capture.missing:
            notes.append(f"{group.name}: not read from {group.nodes[0]} (the starter's value kept): {item}")
        for item in group.reading.capture.dropped:
            notes.append(f"{group.name}: dropped from the starter's values: {item}")
    group_of = {node: group for group in groups for node in group.nodes}
    files: dict[str, str] = dict(ssh_files)
    questions: list[Question] = []
    for name, text in starter.ancestors.items():
        files[f"baselines/{name}.yaml"] = text
    for group in groups:
        shapes = [shape for lane in lanes if lane.nodes[0] in group.nodes
                  if (shape := shape_name(len(lane.nodes))) is not None]
        path = f"baselines/{group.name}.yaml"
        files[path] = baseline_text(starter.template_text, group, time, shapes)
        questions.append(Question(path, line_of(files[path], ["version"]),
                                  f"which version is this baseline? ({ADOPTED_VERSION} written)", "version"))
    settings = starter.template.nccl.settings
    management = {node: management_address(facts[node], _captured(
                      group_of[node], "nccl.settings.socket_ifname", settings.socket_ifname))
                  for node in order.nodes if node in group_of}
    files["inventory/site.yaml"], asked = inventory_text(groups, fabric, order, management)
    questions += asked
    for lane in lanes:
        text, asked = lane_text(lane, group_of[lane.nodes[0]].name, ADOPTED_VERSION)
        files[f"lanes/{lane.name}.yaml"] = text
        questions += asked
    first = groups[0] if groups else None
    kernel_line = None
    if first is not None and first.release is not None:
        kernel_line = ".".join(first.release.split(".")[:2])
    files["baselines/site.yaml"], asked = site_rules_text(
        starter.site_rules, kernel_line, first.page_size if first else None,
        _captured(first, "nccl.settings.ib_merge_nics", settings.ib_merge_nics) if first else None)
    questions += asked
    return Adopted(dict(sorted(files.items())), tuple(sorted(questions)), tuple(notes), groups, lanes,
                   order, fabric)
