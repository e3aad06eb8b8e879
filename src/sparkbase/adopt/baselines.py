"""One baseline per group of identical nodes (pure).

Each node is read against the starter's site baseline (the template: it says which
sysctls, services, packages and files to read). `capture.captured_values` turns a node's
facts into values; adopt adds what capture does not read: the fabric's ports, MTU and GID
index (`adopt.fabric`) and the NCCL settings and library the node's lanes load (else what
its /etc/nccl.conf sets). Nodes whose values are all equal (the GID index aside: a node
whose index moved keeps its own in the inventory) share one baseline, named after its
kernel and page size. Its file is the template's text with the values set and marked
`captured` (node and time) in `sources:`, as `sparkbase capture` writes them.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from sparkbase.adopt.fabric import NodeFabric
from sparkbase.adopt.lanes import ENGINE_MATCHES, FoundLane
from sparkbase.audit.runtime import NCCL_DEFAULTS
from sparkbase.capture import capture_plan, captured_values, round_trip_yaml, write_captured
from sparkbase.capture.core import Capture, Captured
from sparkbase.facts.areas import plan_for
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.cpuset import format_cpu_list
from sparkbase.facts.parsers.fabric import effective_sources
from sparkbase.facts.parsers.nccl import parse_nccl_conf
from sparkbase.facts.script import FactPlan
from sparkbase.model.baseline import Baseline
from sparkbase.model.nccl import TYPED_NCCL_KEYS
from sparkbase.model.netplan import SPARKBASE_NETPLAN_PATH
from sparkbase.model.provenance import covers, dotted_key, leaf_paths
from sparkbase.policy.netplan import clashes_of

#: the version an adopted baseline starts at (a question: the site's own numbering wins)
ADOPTED_VERSION = "1.0.0"
_EXTRA_KEY = re.compile(r"^NCCL_[A-Z0-9_]{1,60}$")
_EXTRA_VALUE = re.compile(r"^[A-Za-z0-9_.,:=^/+-]{0,200}$")


def adopt_plan(template: Baseline) -> FactPlan:
    """What adopt asks each node, in one round trip: everything capture reads for the
    template, every GID table, and every process of an engine (`ENGINE_MATCHES`)."""
    base = capture_plan(plan_for(template, (), FactPlan.stamp_path))
    return replace(base, gid_tables=True, serving_matches=ENGINE_MATCHES, netplan_files=True)


def site_netplan_file(facts: NodeFacts, netdevs: Sequence[str], notes: list[str]) -> str | None:
    """The site's own netplan file that configures every fabric port, when exactly one file
    in /etc/netplan does (it becomes `fabric.netplan_file`: managing the fabric later edits
    that file instead of adding a second one); None when that file is sparkbase's own, and
    None with a note when several files configure the ports."""
    listing = facts.netplan_files
    if listing is None or not netdevs:
        return None
    clashes = [clash for source in effective_sources(listing.sources)
               if (clash := clashes_of(source, netdevs)) is not None]
    whole = [c.path for c in clashes if not c.unknown and set(c.interfaces) == set(netdevs)
             and c.path.startswith("/etc/netplan/")]
    if len(clashes) == 1 and len(whole) == 1:
        return None if whole[0] == SPARKBASE_NETPLAN_PATH else whole[0]
    if clashes:
        notes.append(f"{facts.node}: the fabric ports are configured by "
                     f"{', '.join(sorted(c.path for c in clashes))}: fabric.netplan_file left unset")
    return None


@dataclass(frozen=True)
class NodeReading:
    """One node's values (capture's and adopt's), and its own GID index."""

    node: str
    capture: Capture
    gid_index: int | None

    def key(self) -> str:
        """What makes two nodes identical: every value, canonically."""
        return json.dumps([[value.key, value.value] for value in sorted(self.capture.values, key=_order)],
                          sort_keys=True, default=str)


def _order(value: Captured) -> str:
    return value.key


def nccl_values(settings: Mapping[str, str], notes: list[str], where: str) -> list[Captured]:
    """NCCL_* settings as baseline fields: the typed ones, the rest under `extra`."""
    out: list[Captured] = []
    extra: dict[str, str] = {}
    for key, value in sorted(settings.items()):
        field = TYPED_NCCL_KEYS.get(key)
        typed: object = value
        if field in {"ib_merge_nics", "ib_gid_index", "min_nchannels", "max_nchannels"}:
            typed = int(value) if value.isdigit() and len(value) < 4 else None
        elif field == "ib_hca":
            typed = [part for part in value.split(",") if part] or None
        if field is not None:
            if typed is None:
                notes.append(f"{where}: {key}={value} is not what nccl.settings.{field} holds: left out")
            else:
                out.append(Captured(("nccl", "settings", field), typed))
        elif _EXTRA_KEY.match(key) and _EXTRA_VALUE.match(value):
            extra[key] = value
        else:
            notes.append(f"{where}: {key}={value!r} cannot be written as an NCCL setting: left out")
    if extra:
        out.append(Captured(("nccl", "settings", "extra"), extra))
    return out


def _conf_settings(facts: NodeFacts) -> dict[str, str]:
    """The NCCL_* settings /etc/nccl.conf gives (NCCL's defaults for what it leaves out)."""
    if facts.nccl_conf is None:
        return {}
    conf = parse_nccl_conf(facts.nccl_conf)
    names = dict.fromkeys(a.name for a in conf.assignments if a.name.startswith("NCCL_"))
    found = {name: value for name in names if (value := conf.value(name)) is not None}
    return {**NCCL_DEFAULTS, **found} if found else {}


def node_reading(facts: NodeFacts, template: Baseline, fabric: NodeFabric | None,
                 lanes: Sequence[FoundLane], notes: list[str]) -> NodeReading:
    """What `facts` tell of the node: capture's values, then the fabric and NCCL."""
    capture = captured_values(facts, template)
    values = [v for v in capture.values if v.key not in {"nccl.library.sha256", "nccl.library.version"}]
    missing = list(capture.missing)
    node = facts.node
    if fabric is not None and fabric.views:
        values.append(Captured(("fabric", "ports"),
                               [{"netdev": v.netdev, "hca": v.hca, "port": v.port} for v in fabric.views]))
        if fabric.mtu is not None:
            values.append(Captured(("fabric", "mtu"), fabric.mtu))
        netplan_file = site_netplan_file(facts, [v.netdev for v in fabric.views], notes)
        if netplan_file is not None:
            values.append(Captured(("fabric", "netplan_file"), netplan_file))
    else:
        missing.append("fabric: no RDMA device named a netdev (GID tables)")
    lane = lanes[0] if lanes else None
    if lane is not None:
        if len(lanes) > 1:
            names = ", ".join(x.name for x in lanes)
            notes.append(f"{node}: lanes {names} run here; NCCL is read from {lane.name}")
        settings, origin = lane.nccl, f"lane {lane.name}"
    else:
        settings, origin = _conf_settings(facts), "/etc/nccl.conf"
    values += nccl_values(settings, notes, f"{node} ({origin})")
    if lane is not None and lane.container is not None and not lane.in_slice and lane.cpus:
        # the site's containers hold their own CPUs (--cpuset-cpus) in Docker's scopes
        values = [v for v in values if not v.key.startswith("cpuset")]
        missing = [m for m in missing if not m.startswith("cpuset")]
        values += [Captured(("cpuset", "pinned_by"), "container"),
                   Captured(("cpuset", "cpus"), format_cpu_list(lane.cpus))]
    library = _library(facts, template, lane, notes)
    values += library
    if any(v.key == "nccl.library.provided_by" for v in library):
        # a file the site provides has no package version to read
        missing = [m for m in missing if not m.startswith("nccl.library")]
    return NodeReading(node, Capture(tuple(values), tuple(missing), capture.dropped),
                       fabric.gid_index if fabric is not None else None)


def _library(facts: NodeFacts, template: Baseline, lane: FoundLane | None,
             notes: list[str]) -> list[Captured]:
    """The NCCL library: the one the node's lane maps (path and sha256), else the template's
    path as hashed on the node; its package version when the template's package is
    installed, else `provided_by: site` (a file the site put there)."""
    library = template.nccl.library
    if lane is not None and lane.library is not None:
        path, sha = lane.library
    else:
        path = library.path or ""
        sha = (facts.file_sha256.get(path) or "") if path else ""
    if not sha:
        notes.append(f"{facts.node}: no NCCL library found ({library.path} unread, no lane maps one)")
        return []
    out = [Captured(("nccl", "library", "path"), path), Captured(("nccl", "library", "sha256"), sha)]
    version = facts.packages.get(library.package) if library.package is not None else None
    if version is not None and library.package is not None and path == library.path:
        out.append(Captured(("nccl", "library", "package"), library.package))
        out.append(Captured(("nccl", "library", "version"), version))
    else:
        out.append(Captured(("nccl", "library", "provided_by"), "site"))
    return out


@dataclass(frozen=True)
class Group:
    """Nodes with identical values: one baseline."""

    name: str
    nodes: tuple[str, ...]  # rank order
    reading: NodeReading  # the first node's
    gid_index: int | None  # the group's (most nodes'; a tie: the smallest)

    @property
    def release(self) -> str | None:
        """The kernel release the group's nodes run."""
        return next((str(v.value) for v in self.reading.capture.values if v.key == "kernel.release"), None)

    @property
    def page_size(self) -> int | None:
        """The page size the group's nodes run."""
        found = next((v.value for v in self.reading.capture.values if v.key == "kernel.page_size"), None)
        return found if isinstance(found, int) else None


def _stem(reading: NodeReading) -> str:
    values = {v.key: v.value for v in reading.capture.values}
    release, page = values.get("kernel.release"), values.get("kernel.page_size")
    if not isinstance(release, str) or not isinstance(page, int):
        return "adopted"
    return f"adopted-{release}-{page // 1024}k"[:63]


def group_nodes(readings: Mapping[str, NodeReading], ranks: Sequence[str]) -> tuple[Group, ...]:
    """Nodes in rank order, grouped by identical values; groups in order of their first
    node; each named `adopted-<kernel>-<page>k` (a second group of the same kernel and page
    size gets `-2`, and so on)."""
    by_key: dict[str, list[str]] = {}
    for node in ranks:
        if node in readings:
            by_key.setdefault(readings[node].key(), []).append(node)
    groups: list[Group] = []
    used: Counter[str] = Counter()
    for nodes in by_key.values():
        first = readings[nodes[0]]
        stem = _stem(first)
        used[stem] += 1
        name = stem if used[stem] == 1 else f"{stem}-{used[stem]}"
        indexes = Counter(readings[n].gid_index for n in nodes if readings[n].gid_index is not None)
        best = min(indexes, key=lambda index: (-indexes[index], index)) if indexes else None
        groups.append(Group(name, tuple(nodes), first, best))
    return tuple(groups)


def baseline_text(template_text: str, group: Group, time: str, shapes: Sequence[str]) -> str:
    """The group's baseline file: the template's text with every value set and marked
    captured (by the group's first node, at `time`), the adopted version, `managed: []`
    (sparkbase writes nothing on day one) and the shapes its lanes run on."""
    values = list(group.reading.capture.values)
    if group.gid_index is not None:
        values.append(Captured(("fabric", "gid_index"), group.gid_index))
    provided_by_site = any(v.key == "nccl.library.provided_by" for v in values)
    capture = Capture(tuple(values), group.reading.capture.missing, group.reading.capture.dropped)
    description = (f"adopted from {', '.join(group.nodes)} (identical); what a node cannot tell is "
                   "the starter's, with its source")
    text = write_captured(template_text, capture, group.nodes[0], time, description[:500])
    yaml = round_trip_yaml()
    document = yaml.load(text)
    _strip_comments(document)
    document.yaml_set_start_comment(HEADER)
    document["version"] = ADOPTED_VERSION
    if provided_by_site:
        library = document["nccl"]["library"]
        for key in ("package", "version"):
            if key in library:
                del library[key]
    managed = CommentedSeq()
    managed.fa.set_flow_style()
    keys = list(document)
    at = keys.index("description") + 1 if "description" in keys else 0
    document.insert(at, "managed", managed,
                    comment="day one: sparkbase writes nothing; list the sections to hand over")
    _add_shapes(document, shapes, group.nodes[0], time)
    _drop_spent_placeholders(document)
    stream = io.StringIO()
    yaml.dump(document, stream)
    return stream.getvalue()


#: the first lines of an adopted baseline (the template's comments spoke for its own values)
HEADER = ("Written by `sparkbase adopt`: every value a node tells is marked captured in sources:;\n"
          "the rest is the starter's site baseline, each value with its own source and note.")


def _strip_comments(node: Any) -> None:
    """Drop every comment of a round-trip document (they described the template's values)."""
    if isinstance(node, CommentedMap | CommentedSeq):
        node.ca.items.clear()
        node.ca.comment = None
        node.ca.end = None
        for child in node.values() if isinstance(node, CommentedMap) else node:
            _strip_comments(child)


def _drop_spent_placeholders(document: Any) -> None:
    """Remove a placeholder entry of `sources:` once a more specific entry covers every value
    under its key (the node confirmed them all)."""
    sources = document.get("sources") or {}
    keys = [str(key) for key in sources]
    for key in keys:
        entry = sources[key]
        if not isinstance(entry, dict) or entry.get("kind") != "placeholder":
            continue
        node: Any = document
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue
        prefix = tuple(key.split("."))
        leaves = ([dotted_key((*prefix, *path)) for path in leaf_paths(node)]
                  if isinstance(node, dict) else [key])
        if all(any(other != key and covers(key, other) and covers(other, leaf) for other in keys)
               for leaf in leaves):
            del sources[key]


def _add_shapes(document: Any, shapes: Sequence[str], node: str, time: str) -> None:
    """Add the shapes the group's lanes run on that the baseline does not list (captured)."""
    listed = [item.get("name") for item in document.get("shapes", [])]
    for name in shapes:
        if name in listed:
            continue
        entry = CommentedMap({"name": name, "transport": "nccl-ring"})
        entry.fa.set_flow_style()
        document["shapes"].append(entry)
        source = CommentedMap({"kind": "captured", "node": node, "time": time,
                               "note": f"a lane serves on {name} (its transport is the site's ring NCCL)"})
        source.fa.set_flow_style()
        document["sources"][f"shapes.{len(document['shapes']) - 1}"] = source
