"""`sparkbase capture`: a baseline read from a live node, each value marked `captured`.

The node is asked once, with the fact script of the baseline it is compared against (the
target file's own baseline when it is a site baseline, else the node's): `captured_values`
turns its facts into (field, value) pairs, pure; `write_captured` puts them into the
target's YAML text with ruamel's round trip, so comments and every value the node cannot
tell (`extends`, `description`, fabric, shapes, ...) stay as they were, and records each in
`sources:` as `{kind: captured, node, time}`.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, replace
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.representer import RoundTripRepresenter

from sparkbase.facts.model import NodeFacts, SecureBoot
from sparkbase.facts.parsers.os_release import dgx_os_version
from sparkbase.facts.script import FactPlan
from sparkbase.model.baseline import Baseline
from sparkbase.model.cpuset import CpusetSpec
from sparkbase.model.host import coalescing_value
from sparkbase.model.kernel import TOOLS_PACKAGE_STEM
from sparkbase.model.yamlio import PathKey, dotted

#: packages whose installed versions tell the kernel's, its tools' and the driver's package
#: versions when the node runs a release the baseline does not pin, and whether DGX OS's
#: nvidia-drm options package is still installed (dpkg-query takes the globs)
CAPTURE_PACKAGE_GLOBS = ("linux-image-*", "linux-tools-*", "nvidia-utils-*", "nvidia-drm-options-modeset*")
#: top-level keys a baseline file may have (the model's): a target with any other key is not a
#: baseline
BASELINE_KEYS = frozenset(field.alias or name for name, field in Baseline.model_fields.items())
_OS_RELEASE = re.compile(r"^[A-Za-z0-9._-]{1,40}$")


@dataclass(frozen=True)
class Captured:
    """One value read from the node, and the baseline field it sets."""

    path: PathKey
    value: object

    @property
    def key(self) -> str:
        """The field's dotted path (its key in `sources:`)."""
        return dotted(self.path)


@dataclass(frozen=True)
class Capture:
    """What a node told: the values to write, and what it could not tell (kept as they were)."""

    values: tuple[Captured, ...]
    missing: tuple[str, ...]  # "field: why", for fields left at the file's value
    dropped: tuple[str, ...] = ()  # list items the node contradicts, removed


def capture_plan(plan: FactPlan) -> FactPlan:
    """The baseline's fact plan, plus what capture needs: the enrolled MOK certificates and
    the installed kernel and driver packages of any release."""
    packages = tuple(dict.fromkeys([*plan.packages, *CAPTURE_PACKAGE_GLOBS]))
    return replace(plan, mok_keys=True, packages=packages)


def _yes(value: str | None) -> bool | None:
    """A module parameter's `Y`/`N` (or 1/0) as a bool; None when unreadable."""
    if value is None:
        return None
    text = value.strip().upper()
    if text in {"Y", "1"}:
        return True
    if text in {"N", "0"}:
        return False
    return None


def _number_or_text(value: str) -> object:
    """A sysctl value as YAML would hold it: digits as an int (as baselines write them)."""
    return int(value) if value.isdigit() and len(value) < 19 else value


class _Collector:
    def __init__(self) -> None:
        self.values: list[Captured] = []
        self.missing: list[str] = []
        self.dropped: list[str] = []

    def put(self, path: PathKey, value: object, why_missing: str) -> None:
        if value is None:
            self.missing.append(f"{dotted(path)}: {why_missing}")
        else:
            self.values.append(Captured(path, value))

    def put_null(self, path: PathKey) -> None:
        """Set `path` to null: the node shows the baseline should not manage it."""
        self.values.append(Captured(path, None))


def captured_values(facts: NodeFacts, baseline: Baseline) -> Capture:
    """Every value `baseline` pins that `facts` can tell, as the node has it (pure).

    Lists the baseline manages (command-line arguments, disabled services) keep the items
    the node carries out; an item the node contradicts is dropped and named in `dropped`.
    """
    out = _Collector()
    release = facts.kernel_release
    out.put(("kernel", "release"), release, "uname -r gave no answer")
    out.put(("kernel", "page_size"), facts.page_size, "getconf PAGESIZE gave no answer")
    if release is not None:
        out.put(("kernel", "package_version"), facts.packages.get(f"linux-image-{release}"),
                f"linux-image-{release} is not installed")
    carried = set(facts.cmdline)
    if facts.cmdline:
        kept = [arg for arg in baseline.kernel.cmdline_add if arg in carried]
        out.dropped += [f"kernel.cmdline_add: {arg} (not on /proc/cmdline)"
                        for arg in baseline.kernel.cmdline_add if arg not in carried]
        out.put(("kernel", "cmdline_add"), kept, "")
    else:
        out.missing.append("kernel.cmdline_add: /proc/cmdline was not read")
    _kernel_tools(facts, baseline, out)
    _fallback(facts, baseline, out)
    grub = facts.grub
    if grub is not None and release is not None:
        entry = grub.default_entry
        out.put(("kernel", "pin_grub_default"), entry is not None and entry.release == release, "")
    else:
        out.missing.append("kernel.pin_grub_default: grub.cfg was not read")

    seen_os = dgx_os_version(facts.dgx_release) if facts.dgx_release is not None else None
    out.put(("os", "release"), _os_release(seen_os, baseline.os.release), "/etc/dgx-release names no release")

    utils = f"nvidia-utils-{baseline.driver.branch.split('-')[0]}"
    out.put(("driver", "version"), facts.gpu.driver_version, f"nvidia-smi: {facts.gpu.error or 'no answer'}")
    out.put(("driver", "package_version"), facts.packages.get(utils), f"{utils} is not installed")

    library = baseline.nccl.library
    if library.package is not None:  # a site-provided file has no package to read a version of
        out.put(("nccl", "library", "version"), facts.packages.get(library.package),
                f"{library.package} is not installed")
    if library.path is not None:  # an image's library is not on the host
        out.put(("nccl", "library", "sha256"), facts.file_sha256.get(library.path),
                f"{library.path} could not be hashed")

    memory = baseline.memory
    out.put(("memory", "transparent_hugepages"), facts.thp, "THP mode unreadable")
    if memory.sysctls:
        sysctls = {key: facts.sysctls.get(key) for key in memory.sysctls}
        unread = sorted(key for key, value in sysctls.items() if value is None)
        if unread:
            out.missing.append(f"memory.sysctls: {', '.join(unread)} unreadable")
        else:
            out.put(("memory", "sysctls"), {k: _number_or_text(str(v)) for k, v in sysctls.items()}, "")
    if memory.swap is not None:
        _swap(facts, memory.swap.path, out)
    _factory_swap(facts, baseline, out)
    _memory_saver(facts, baseline, out)

    sb = facts.secure_boot
    out.put(("secure_boot", "enabled"), None if sb is None else sb is SecureBoot.ENABLED,
            "mokutil --sb-state gave no answer")
    _mok(facts, baseline, out)

    host = baseline.host
    target = facts.default_target
    out.put(("host", "boot_target"),
            target if target in {"multi-user.target", "graphical.target"} else None,
            f"systemctl get-default: {target or 'no answer'}")
    manager = facts.units.get("display-manager.service")
    out.put(("host", "display_manager"), None if manager is None else manager.active,
            "display-manager.service state unreadable")
    for param in ("modeset", "fbdev"):
        out.put(("host", "nvidia_drm", param), _yes(facts.module_params.get(f"nvidia_drm.{param}")),
                "nvidia_drm is not loaded")
    _nvidia_drm_purge(facts, baseline, out)
    _fan_control(facts, baseline, out)
    _nvme_coalescing(facts, out)
    _cpu_governor(facts, baseline, out)
    if host.disable_services and facts.units:
        kept = [unit for unit in host.disable_services
                if unit in facts.units and not facts.units[unit].enabled and not facts.units[unit].active]
        out.dropped += [f"host.disable_services: {unit} (enabled or running on the node)"
                        for unit in host.disable_services if unit not in kept]
        out.put(("host", "disable_services"), kept, "")
    if host.packages:
        pins = [{"name": pin.name, "version": facts.packages.get(pin.name)} for pin in host.packages]
        if all(pin["version"] for pin in pins):
            out.put(("host", "packages"), pins, "")
        else:
            out.missing.append("host.packages: not every package is installed")

    cpus = facts.slice_allowed_cpus
    out.put(("cpuset", "cpus"), _cpulist(cpus) if cpus else None,
            f"{baseline.cpuset.slice} has no AllowedCPUs")
    return Capture(tuple(out.values), tuple(out.missing), tuple(out.dropped))


def _kernel_tools(facts: NodeFacts, baseline: Baseline, out: _Collector) -> None:
    """`kernel.tools`: linux-tools of the running kernel is installed (cpupower, which DGX OS's
    governor unit runs)."""
    release = facts.kernel_release
    if release is None or ("dpkg" in facts.errors and not facts.packages):
        out.missing.append("kernel.tools: the installed packages were not read")
        return
    out.put(("kernel", "tools"), f"{TOOLS_PACKAGE_STEM}-{release}" in facts.packages, "")


def _other_kernels(facts: NodeFacts) -> list[str]:
    """Releases other than the running one with their linux-image installed and a (non
    recovery) GRUB menu entry: the kernels a node can fall back to."""
    menu = {entry.release for entry in facts.grub.entries if not entry.recovery} if facts.grub else set()
    return sorted(name.removeprefix("linux-image-") for name in facts.packages
                  if name.startswith("linux-image-")
                  and name.removeprefix("linux-image-") in menu - {facts.kernel_release})


def _fallback(facts: NodeFacts, baseline: Baseline, out: _Collector) -> None:
    """`kernel.fallback`: the baseline's fallback release, installed with its GRUB entry, at
    the version the node has. A baseline that keeps none still keeps none (a node's old
    kernels are not a decision); the node's other bootable kernels are named."""
    fallback = baseline.kernel.fallback
    others = _other_kernels(facts)
    if fallback is None:
        if others:
            out.missing.append(f"kernel.fallback: the baseline keeps none; the node can also boot "
                               f"{', '.join(others)}")
        return
    if fallback.release not in others:
        out.missing.append(f"kernel.fallback: {fallback.release} is not installed with a GRUB entry"
                           + (f" (the node has {', '.join(others)})" if others else ""))
        return
    out.put(("kernel", "fallback", "release"), fallback.release, "")
    out.put(("kernel", "fallback", "package_version"), facts.packages[f"linux-image-{fallback.release}"], "")


def _factory_swap(facts: NodeFacts, baseline: Baseline, out: _Collector) -> None:
    """`memory.factory_swap.fstab`: the installer's swap line as /etc/fstab has it (noauto, or
    as installed); a baseline that leaves the file alone still leaves it."""
    factory = baseline.memory.factory_swap
    if factory is None:
        return
    if facts.fstab is None:
        out.missing.append("memory.factory_swap: /etc/fstab was not read")
        return
    lines = [entry for entry in facts.fstab if entry.spec == factory.path and entry.vfstype == "swap"]
    if not lines:
        out.missing.append(f"memory.factory_swap: /etc/fstab has no swap line for {factory.path}")
        return
    noauto = all("noauto" in entry.options.split(",") for entry in lines)
    out.put(("memory", "factory_swap", "fstab"), "noauto" if noauto else "as-installed", "")
    if not noauto and factory.swapoff:  # swapoff goes with noauto only
        out.put(("memory", "factory_swap", "swapoff"), False, "")


def _dkms_version(facts: NodeFacts, dkms_name: str) -> str | None:
    """The version DKMS has installed of `dkms_name` for the running kernel."""
    versions = {entry.version for entry in facts.dkms
                if entry.name == dkms_name and entry.kernel == facts.kernel_release and entry.installed}
    return versions.pop() if len(versions) == 1 else None


def _dkms_build(block: PathKey, dkms_name: str, version: str | None, facts: NodeFacts,
                out: _Collector) -> None:
    """A DKMS module's name and version, where dkms has it installed for the running kernel."""
    if version is None:
        out.missing.append(f"{dotted((*block, 'dkms_version'))}: dkms status has no {dkms_name} "
                           f"installed for {facts.kernel_release}")
        return
    out.put((*block, "dkms_name"), dkms_name, "")
    out.put((*block, "dkms_version"), version, "")


def _memory_saver(facts: NodeFacts, baseline: Baseline, out: _Collector) -> None:
    """The patched nvidia-uvm: its DKMS version (its source checkout is the baseline's pin),
    and the loaded module's srcversion and packing flag, when the module loaded is the one
    DKMS built (modinfo of the file the kernel loads has the loaded srcversion)."""
    saver = baseline.memory.memory_saver
    if saver is None or not saver.required:
        return
    dkms = _dkms_version(facts, saver.dkms_name)
    _dkms_build(("memory", "memory_saver"), saver.dkms_name, dkms, facts, out)
    loaded = facts.nvidia_modules.get(f"{saver.module}.srcversion")
    built = facts.memory_saver.srcversion if facts.memory_saver is not None else None
    patched = dkms is not None and loaded is not None and loaded == built
    if patched:
        out.put(("memory", "memory_saver", "module"), saver.module, "")
    out.put(("memory", "memory_saver", "srcversion"), loaded if patched else None,
            f"{saver.module} loaded ({loaded or 'no srcversion'}) is not the DKMS build"
            f" ({built or 'modinfo gave none'})")
    packing = _yes(facts.module_params.get(f"{saver.module}.{saver.packing_parameter}"))
    out.put(("memory", "memory_saver", "packing"), packing if patched else None,
            f"{saver.packing_parameter} unreadable, or the module is not the DKMS build")


def _nvidia_drm_purge(facts: NodeFacts, baseline: Baseline, out: _Collector) -> None:
    """`host.nvidia_drm.purge`: kept where the options package is gone; dropped where the
    node still has it installed."""
    purge = baseline.host.nvidia_drm.purge
    if purge is None:
        return
    if "dpkg" in facts.errors and not facts.packages:
        out.missing.append("host.nvidia_drm.purge: the installed packages were not read")
        return
    version = facts.packages.get(purge)
    if version is not None:
        out.dropped.append(f"host.nvidia_drm.purge: {purge} (installed on the node, {version})")
        out.put_null(("host", "nvidia_drm", "purge"))
    else:
        out.put(("host", "nvidia_drm", "purge"), purge, "")


def _fan_control(facts: NodeFacts, baseline: Baseline, out: _Collector) -> None:
    """The fan-control DKMS module: package and DKMS versions, the module loaded, its daemon
    enabled and running (the names are kept where the node confirms them)."""
    fan = baseline.host.fan_control
    if fan is None:
        return
    out.put(("host", "fan_control", "package_version"), facts.packages.get(fan.package),
            f"{fan.package} is not installed")
    _dkms_build(("host", "fan_control"), fan.dkms_name, _dkms_version(facts, fan.dkms_name), facts, out)
    out.put(("host", "fan_control", "module"), fan.module if fan.module in facts.modules else None,
            f"{fan.module} is not loaded")
    state = facts.units.get(fan.service)
    running = state is not None and state.enabled and state.active
    out.put(("host", "fan_control", "service"), fan.service if running else None,
            f"{fan.service} is not enabled and active")


def _nvme_coalescing(facts: NodeFacts, out: _Collector) -> None:
    """`host.nvme.interrupt_coalescing`: NVMe feature 0x08 is DGX OS's default (on) or 0 (off)."""
    value = facts.nvme_coalescing
    known = {coalescing_value(True): True, coalescing_value(False): False}
    out.put(("host", "nvme", "interrupt_coalescing"), None if value is None else known.get(value),
            "feature 0x08 unread" if value is None
            else f"feature 0x08 = {value:#x}, neither on (0x107) nor off")


def _cpu_governor(facts: NodeFacts, baseline: Baseline, out: _Collector) -> None:
    """`host.cpu_governor`: performance when every CPU runs it and the kernel's linux-tools
    is installed (DGX OS's unit keeps it so); else not managed (null)."""
    if not facts.governors:
        out.missing.append("host.cpu_governor: no CPU reported a scaling governor")
        return
    seen = set(facts.governors.values())
    tools_package = f"{TOOLS_PACKAGE_STEM}-{facts.kernel_release}"
    tools = facts.kernel_release is not None and tools_package in facts.packages
    if seen == {"performance"} and tools:
        out.put(("host", "cpu_governor"), "performance", "")
        return
    if baseline.host.cpu_governor is not None:
        why = (f"the CPUs run {', '.join(sorted(seen))}" if seen != {"performance"}
               else f"{tools_package} is not installed")
        out.dropped.append(f"host.cpu_governor: {baseline.host.cpu_governor} ({why})")
    out.put_null(("host", "cpu_governor"))


def _os_release(seen: str | None, pinned: str) -> str | None:
    """`DGX OS <version>` the node runs; the pinned release line when it covers that version
    (as the audit matches them: `DGX OS 7.5` covers 7.5.0), so a line is not narrowed."""
    if not seen or not _OS_RELEASE.match(seen):
        return None
    line = pinned.split()[-1]
    return pinned if seen == line or seen.startswith(line + ".") else f"DGX OS {seen}"


def _swap(facts: NodeFacts, path: str, out: _Collector) -> None:
    """The swap file's size and header page size, when it is active."""
    active = next((swap for swap in facts.swaps if swap.name == path), None)
    header = facts.swap_header_page_size.get(path)
    if active is None or header is None:
        out.missing.append(f"memory.swap: {path} is not an active swap file with a readable header")
        return
    gib = round((active.size_bytes + header) / 2**30)  # swapon's size is the file less its header page
    out.put(("memory", "swap", "size_gib"), gib, "")
    out.put(("memory", "swap", "header_page_size"), header, "")


def _mok(facts: NodeFacts, baseline: Baseline, out: _Collector) -> None:
    """The enrolled MOK the baseline pins, else the node's one enrolled MOK; only for a
    baseline that pins one or signs a DKMS module (else it pins no key, and still pins none)."""
    enrolled = facts.mok_fingerprints
    pinned = baseline.secure_boot.mok_fingerprint
    saver = baseline.memory.memory_saver
    if pinned is None and (saver is None or not saver.required):
        return
    if pinned is not None and pinned in enrolled:
        out.put(("secure_boot", "mok_fingerprint"), pinned, "")
    elif len(enrolled) == 1:
        out.put(("secure_boot", "mok_fingerprint"), enrolled[0], "")
    elif pinned is not None or enrolled:
        out.missing.append(
            f"secure_boot.mok_fingerprint: {len(enrolled)} MOK(s) enrolled, none the pinned one")


def _cpulist(cpus: frozenset[int]) -> str:
    return CpusetSpec(cpus=sorted(cpus)).cpulist()


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
