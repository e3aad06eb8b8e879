"""`sparkbase capture`: a baseline read from a live node, each value marked `captured`.

The node is asked once, with the fact script of the baseline it is compared against (the
target file's own baseline when it is a site baseline, else the node's): `captured_values`
turns its facts into (field, value) pairs, pure; `write_captured` puts them into the
target's YAML text with ruamel's round trip, so comments and every value the node cannot
tell (`extends`, `description`, fabric, shapes, ...) stay as they were, and records each in
`sources:` as `{kind: captured, node, time}`.

Each area's own reading is `capture/AREA.py`; `AREAS` runs them in the baseline's order.
"""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.representer import RoundTripRepresenter

from sparkbase.capture import cpuset, driver, host, kernel, memory, nccl, secure_boot
from sparkbase.capture.core import Capture, Collector
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.script import FactPlan
from sparkbase.model.baseline import Baseline
from sparkbase.model.yamlio import PathKey

#: packages whose installed versions tell the kernel's, its tools' and the driver's package
#: versions when the node runs a release the baseline does not pin, and whether DGX OS's
#: nvidia-drm options package is still installed (dpkg-query takes the globs)
CAPTURE_PACKAGE_GLOBS = ("linux-image-*", "linux-tools-*", "nvidia-utils-*", "nvidia-drm-options-modeset*")
#: top-level keys a baseline file may have (the model's): a target with any other key is not a
#: baseline
BASELINE_KEYS = frozenset(field.alias or name for name, field in Baseline.model_fields.items())
#: how each area's live values become baseline values, in the baseline file's order (the
#: order values, and their `sources:` entries, are written)
AREAS = (kernel.capture, host.os_release, driver.capture, nccl.capture, memory.capture,
         secure_boot.capture, host.capture, cpuset.capture)


def capture_plan(plan: FactPlan) -> FactPlan:
    """The baseline's fact plan, plus what capture needs: the enrolled MOK certificates and
    the installed kernel and driver packages of any release."""
    packages = tuple(dict.fromkeys([*plan.packages, *CAPTURE_PACKAGE_GLOBS]))
    return replace(plan, mok_keys=True, packages=packages)


def captured_values(facts: NodeFacts, baseline: Baseline) -> Capture:
    """Every value `baseline` pins that `facts` can tell, as the node has it (pure).

    Lists the baseline manages (command-line arguments, disabled services) keep the items
    the node carries out; an item the node contradicts is dropped and named in `dropped`.
    """
    out = Collector()
    for area in AREAS:
        area(facts, baseline, out)
    return Capture(tuple(out.values), tuple(out.missing), tuple(out.dropped))


# --- the YAML writer -------------------------------------------------------------------


class NotABaseline(ValueError):
    """The target file is not a baseline: capture refuses to write over it."""


def check_baseline_text(text: str) -> None:
    """Refuse a target that is not a concrete baseline file (raises NotABaseline)."""
    data = round_trip_yaml().load(text)
    if not isinstance(data, dict):
        raise NotABaseline("is not a mapping of baseline fields")
    strange = sorted(str(key) for key in data if key not in BASELINE_KEYS)
    if strange:
        raise NotABaseline(f"has key(s) no baseline has ({', '.join(strange[:3])}): not a baseline file")
    if "version" not in data:
        raise NotABaseline("has no version: key: not a baseline file")
    if data.get("abstract") is True:
        raise NotABaseline("is an abstract baseline (never assigned to a node): capture into a concrete one")


def round_trip_yaml() -> Any:
    """ruamel in round-trip mode as baselines are written: quotes kept, no folding, null as
    `null` (capture and adopt write through it)."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a line the file did not fold
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.Representer = _null_writing_representer()
    return yaml


def _null_writing_representer() -> Any:
    """ruamel's round-trip representer writing null as `null`, as baselines write it (its
    default writes nothing: `key:`); a subclass, so no other ruamel user changes."""
    class NullWritingRepresenter(RoundTripRepresenter):
        pass

    def represent_null(representer: Any, _value: None) -> Any:
        return representer.represent_scalar("tag:yaml.org,2002:null", "null")

    NullWritingRepresenter.add_representer(type(None), represent_null)
    return NullWritingRepresenter


def _flow(value: object) -> object:
    """Lists and the mappings in them as ruamel flow nodes (how baselines write them)."""
    if isinstance(value, list):
        seq = CommentedSeq([_flow(item) for item in value])
        if all(not isinstance(item, dict | list) for item in value):
            seq.fa.set_flow_style()
        return seq
    if isinstance(value, dict):
        mapping = CommentedMap(value)
        mapping.fa.set_flow_style()
        return mapping
    return value


def _set(document: Any, path: PathKey, value: object) -> None:
    """Set `path` in the round-trip document, making mappings on the way (keys kept in place)."""
    node = document
    for depth, key in enumerate(path[:-1]):
        child = node.get(key)
        if not isinstance(child, dict):
            child = CommentedMap()
            _add(node, key, child, top=depth == 0)
        node = child
    last = path[-1]
    if isinstance(value, dict) and path[-1] == "sysctls":
        old = node.get(last)
        mapping = old if isinstance(old, CommentedMap) else CommentedMap()
        for key in [k for k in mapping if k not in value]:
            del mapping[key]
        for key, item in value.items():
            mapping[key] = item
        node[last] = mapping
        return
    _add(node, last, _flow(value), top=len(path) == 1)


def _add(mapping: Any, key: str | int, value: object, top: bool) -> None:
    """Set `key`; a new top-level block goes where the model orders it (after the blocks
    the model puts before it), so `sources:` stays last."""
    order = list(Baseline.model_fields)
    if key in mapping or not top or key not in order:
        mapping[key] = value
        return
    keys = list(mapping)
    before = [i for i, k in enumerate(keys) if k in order and order.index(k) < order.index(str(key))]
    mapping.insert(before[-1] + 1 if before else 0, key, value)


def captured_source(node: str, time: str) -> dict[str, str]:
    """The `sources:` entry of a captured value."""
    return {"kind": "captured", "node": node, "time": time}


def write_captured(text: str, capture: Capture, node: str, time: str, description: str | None = None) -> str:
    """`text` (a baseline file) with the captured values set and marked in `sources:`.

    Comments, key order and every other value stay; a source entry under a captured field
    (a more specific key) is removed, since the captured value replaces what it described.
    """
    document = round_trip_yaml().load(text)
    if description is not None:
        document["description"] = description
    for value in capture.values:
        _set(document, value.path, value.value)
    sources = document.get("sources")
    if not isinstance(sources, CommentedMap):
        sources = CommentedMap()
        document["sources"] = sources
    for value in capture.values:
        for key in [k for k in sources if str(k).startswith(value.key + ".")]:
            del sources[key]
        entry = CommentedMap(captured_source(node, time))
        entry.fa.set_flow_style()
        sources[value.key] = entry
    stream = io.StringIO()
    round_trip_yaml().dump(document, stream)
    return stream.getvalue()
