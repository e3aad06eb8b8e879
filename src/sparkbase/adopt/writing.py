"""The adopted site's files as text, and the questions they leave, each at its FILE:LINE (pure).

The inventory and the lane files are written here field by field (stable order, one
style); `baselines/site.yaml` is the starter's, with the contract values the nodes tell.
A value no node can tell is never invented: it is left out or kept as the starter has it,
marked `# placeholder: ...` on its line, and asked as a `Question`.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkbase.adopt.baselines import Group
from sparkbase.adopt.fabric import Fabric, RankOrder
from sparkbase.adopt.lanes import FoundLane
from sparkbase.capture import round_trip_yaml

INVENTORY = "inventory/site.yaml"
SITE_RULES = "baselines/site.yaml"
_PLAIN = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9._/:@+-]*$")
_RESERVED = {"null", "true", "false", "yes", "no", "on", "off", "~"}


@dataclass(frozen=True, order=True)
class Question:
    """Something no node can tell, asked at the line of the file that holds its placeholder."""

    file: str  # relative to the site, POSIX
    line: int
    text: str
    key: str  # the field it is about

    def shown(self) -> str:
        """`lanes/dsv41-flash.yaml:3: which lane is production? (proxy)`."""
        return f"{self.file}:{self.line}: {self.text} ({self.key})"


def scalar(value: object) -> str:
    """One YAML scalar: plain when it reads back as the same string, else double-quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED and not re.fullmatch(r"[0-9.:+-]+", text):
        return text
    return json.dumps(text)


def _flow(items: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"{key}: {scalar(value)}" for key, value in items.items()) + "}"


def _list(items: Sequence[object]) -> str:
    return "[" + ", ".join(scalar(item) for item in items) + "]"


class _Text:
    """Lines being written, and the questions asked at them."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: list[str] = []
        self.questions: list[Question] = []

    def add(self, line: str, question: str | None = None, key: str = "") -> None:
        if question is not None:
            line = f"{line}  # placeholder: {question}"
            self.questions.append(Question(self.file, len(self.lines) + 1, question, key))
        self.lines.append(line)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def inventory_text(groups: Sequence[Group], fabric: Fabric, order: RankOrder,
                   management: Mapping[str, str | None]) -> tuple[str, list[Question]]:
    """`inventory/site.yaml`: each node's alias, rank, management address, baseline, GID
    index (when not its baseline's) and cables with their paths."""
    baseline_of = {node: group for group in groups for node in group.nodes}
    out = _Text(INVENTORY)
    out.add("# Written by `sparkbase adopt` from the nodes themselves: each RDMA path is a RoCE v2")
    out.add("# GID holding an IPv4 address, paired with the one other node's end in its subnet.")
    out.add("ssh:")
    out.add("  config: inventory/ssh_config")
    out.add("  known_hosts: inventory/known_hosts")
    out.add("")
    out.add("nodes:")
    for rank, node in enumerate(order.nodes):
        group = baseline_of.get(node)
        if group is None:
            continue
        found = fabric.nodes.get(node)
        out.add(f"  {node}:")
        out.add(f"    ssh_host: {node}")
        if rank == 0:
            out.add(f"    rank: {rank}", f"is {node} the head of the ring? rank order is {order.how}",
                    f"nodes.{node}.rank")
        else:
            out.add(f"    rank: {rank}")
        address = management.get(node)
        if address is None:
            out.add("    management_address: null",
                    f"{node}'s management address (the NCCL bootstrap interface has no IPv4 address)",
                    f"nodes.{node}.management_address")
        else:
            out.add(f"    management_address: {scalar(address)}")
        out.add(f"    baseline: {group.name}")
        if found is not None and found.gid_index is not None and found.gid_index != group.gid_index:
            out.add(f"    gid_index: {found.gid_index}")
        cables = found.cables if found is not None else ()
        if not cables:
            out.add("    links: []")
            continue
        out.add("    links:")
        for cable in cables:
            out.add(f"      - port: {cable.port}")
            out.add(f"        peer: {cable.peer}")
            out.add(f"        peer_port: {cable.peer_port}")
            out.add("        paths:")
            for path in cable.paths:
                out.add("          - " + _flow({"netdev": path.netdev, "hca": path.hca,
                                                "peer_netdev": path.peer_netdev, "subnet": path.subnet,
                                                "address": path.address}))
    return out.text(), out.questions


def shape_name(count: int) -> str | None:
    """The shape a lane on `count` nodes runs as (none for other counts)."""
    return {4: "ring4", 3: "triangle3"}.get(count)


def lane_text(lane: FoundLane, baseline: str, version: str) -> tuple[str, list[Question]]:
    """`lanes/NAME.yaml` of a lane found serving."""
    out = _Text(f"lanes/{lane.name}.yaml")
    how = (f"container {lane.container.name}" if lane.container is not None
           else f"unit {lane.unit}" if lane.unit else "no unit or container")
    out.add(f"# Found serving by `sparkbase adopt` on {', '.join(lane.nodes)} ({how}).")
    for note in lane.notes:
        out.add(f"# note: {note}")
    description = f"{lane.engine} {lane.model} on {len(lane.nodes)} node(s), as found"
    out.add(f"description: {scalar(description[:500])}",
            "which lane is production? the proxy's .env names it", "proxy")
    out.add(f"model: {scalar(lane.model)}")
    out.add(f"engine: {lane.engine}")
    out.add(f"baseline: {baseline}")
    out.add(f"baseline_version: {version}")
    shape = shape_name(len(lane.nodes))
    if shape is None:
        out.add("shape: ring4", f"the lane runs on {len(lane.nodes)} node(s): no shape sparkbase knows",
                "shape")
    else:
        out.add(f"shape: {shape}")
    out.add(f"nodes: {_list(lane.nodes)}")
    out.add("enabled: true")
    out.add("runtime:")
    if lane.container is not None:
        fields: dict[str, object] = {"name": lane.container.name}
        if lane.container.image is not None:
            fields["image"] = lane.container.image
        out.add(f"  container: {_flow(fields)}")
    if lane.unit is not None:
        out.add(f"  unit: {lane.unit}")
    elif lane.container is None:
        out.add("  # unit:", "what starts the lane? its processes are in no unit nor container",
                "runtime.unit")
    out.add(f"  match: {_list(lane.match)}")
    out.add(f"  endpoint: {_flow({'node': lane.head, 'port': lane.port})}")
    if lane.metrics:
        metrics: dict[str, object] = {"port": lane.port, "path": "/metrics"}
        line = f"  metrics: {_flow(metrics)}"
        if len(lane.nodes) > 1:
            line = line[:-1] + f", nodes: {_list([lane.head])}}}"
        out.add(line)
    return out.text(), out.questions


def line_of(text: str, path: Sequence[str | int]) -> int:
    """The 1-based line of the key at `path` in YAML `text` (the nearest found parent's)."""
    node = round_trip_yaml().load(text)
    line = 1
    for part in path:
        try:
            line = node.lc.item(part)[0] + 1 if isinstance(part, int) else node.lc.key(part)[0] + 1
            node = node[part]
        except (KeyError, IndexError, AttributeError, TypeError):
            break
    return line


PROXY_BLOCK = (
    "# placeholder: the model-name proxy's .env and the variable that names the serving lane",
    "# (no node can tell them; `sparkbase lane switch` needs both). Fill in and uncomment:",
    "# proxy:",
    "#   env_file: /path/to/the/proxy/.env",
    "#   key: VARIABLE",
)


def site_rules_text(starter: str, kernel_line: str | None, page_size: int | None,
                    merge_nics: int | None) -> tuple[str, list[Question]]:
    """`baselines/site.yaml`: the starter's contract and triggers, with the kernel line,
    page size and NCCL_IB_MERGE_NICS the nodes run; the proxy left for the site to give."""
    yaml = round_trip_yaml()
    document = yaml.load(starter)
    contract = document["contract"]
    if kernel_line is not None:
        contract["kernel_line"] = kernel_line
    if page_size is not None:
        contract["page_size"] = page_size
    if merge_nics is not None:
        contract["nccl_ib_merge_nics"] = merge_nics
    if "proxy" in document:
        del document["proxy"]
    stream = io.StringIO()
    yaml.dump(document, stream)
    text = stream.getvalue().rstrip("\n") + "\n\n" + "\n".join(PROXY_BLOCK) + "\n"
    lines = text.splitlines()
    questions = [
        Question(SITE_RULES, line_of(text, ["site"]), "the site's name (the starter's)", "site"),
        Question(SITE_RULES, line_of(text, ["contract"]),
                 "the contract's decisions (shared library and netplan shape, memory saver, display "
                 "carve-out, transports) are the starter's: confirm them", "contract"),
        Question(SITE_RULES, line_of(text, ["triggers"]),
                 "the re-open triggers are the starter's: keep them?", "triggers"),
        Question(SITE_RULES, lines.index(PROXY_BLOCK[0]) + 1,
                 "where is the proxy's .env, and which variable names the serving lane?", "proxy"),
    ]
    return text, questions
