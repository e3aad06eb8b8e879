"""Runtime checks: what a lane's serving processes actually load, against the lane's baseline.

Pure: the lanes to look for and a node's facts in (`NodeFacts.serving`, read from the
host's /proc in the fact script's round trip), one `CheckResult` per lane and check out.
Each failure names the PID and what differs:

- `runtime.nccl_env`: the NCCL settings the process would use (its environment, else the
  nccl.conf files its own mount namespace shows, else NCCL's default) equal the baseline's;
- `runtime.nccl_library`: the libnccl it maps is the pinned path with the pinned sha256;
- `runtime.affinity`: its CPU affinity is the serving slice's CPUs;
- `runtime.cgroup`: its cgroup is under the serving slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbase.audit.registry import CheckResult
from sparkbase.facts.parsers.cpus import format_cpu_list

if TYPE_CHECKING:
    from sparkbase.facts.model import NodeFacts
    from sparkbase.facts.runtime import ServingProcess
    from sparkbase.model.site import Site

#: NCCL's built-in defaults for the settings a baseline pins, where one exists (src/misc
#: and src/transport/net_ib.cc NCCL_PARAM defaults); a setting absent here has none
NCCL_DEFAULTS = {"NCCL_IB_MERGE_NICS": "1"}
#: the runtime checks, in the order they are reported
KINDS = ("nccl_env", "nccl_library", "affinity", "cgroup")


@dataclass(frozen=True)
class LaneProbe:
    """A lane to look for on a node: its name, how to find it (every `match` string in the
    command line), and what its baseline needs of the process, as plain data (kept in the
    gate's cache and judged without the typed model)."""

    lane: str
    match: tuple[str, ...]
    #: the NCCL settings the baseline pins, as environment variables (`NcclSettings.as_env`)
    nccl_env: tuple[tuple[str, str], ...]
    library_path: str
    library_sha256: str
    slice_cpus: frozenset[int]
    slice_name: str


def lane_probe(site: Site, name: str) -> LaneProbe | None:
    """How to find lane `name`'s serving processes and what they must load; None when the
    lane has no runtime block (or no baseline)."""
    lane = site.lanes[name]
    baseline = site.baselines.get(lane.baseline)
    if lane.runtime is None or baseline is None:
        return None
    return LaneProbe(
        lane=name,
        match=tuple(lane.runtime.match),
        nccl_env=tuple(baseline.nccl.settings.as_env().items()),
        library_path=baseline.nccl.library.path,
        library_sha256=baseline.nccl.library.sha256,
        slice_cpus=frozenset(baseline.cpuset.cpus),
        slice_name=baseline.cpuset.slice,
    )


def probes_by_node(lanes: Iterable[tuple[Sequence[str], LaneProbe | None]]) -> dict[str, list[LaneProbe]]:
    """Per node, the probes of the (nodes, probe) lanes that run there (lanes without a probe
    left out), in the lanes' order."""
    out: dict[str, list[LaneProbe]] = {}
    for nodes, probe in lanes:
        if probe is None:
            continue
        for node in nodes:
            out.setdefault(node, []).append(probe)
    return out


def lane_probes(site: Site, lanes: Iterable[str] | None = None) -> dict[str, list[LaneProbe]]:
    """Per node, the lanes (all with a runtime block, or just `lanes`) to look for there."""
    names = sorted(site.lanes) if lanes is None else list(lanes)
    return probes_by_node((site.lanes[name].nodes, lane_probe(site, name)) for name in names)


def first_matches(probes: Iterable[LaneProbe]) -> tuple[str, ...]:
    """The strings the node searches command lines for (each lane's first)."""
    return tuple(sorted({probe.match[0] for probe in probes}))


def _result(node: str, check: str, lane: str, status: str, expected: str | None,
            observed: str | None, fix: str | None = None) -> CheckResult:
    return CheckResult(f"runtime.{check}.{lane}", "runtime", "error", node,
                       status, expected, observed, fix)  # type: ignore[arg-type]


def nccl_env_problems(process: ServingProcess, probe: LaneProbe) -> list[str]:
    """`NCCL_X=got (from where), expected want` for every setting that differs."""
    problems: list[str] = []
    for key, want in probe.nccl_env:
        got, where = process.nccl_setting(key, NCCL_DEFAULTS.get(key))
        if got != want:
            if got is None:
                problems.append(f"{key} unset (not in its environment nor any nccl.conf it reads), "
                                f"expected {key}={want}")
            else:
                problems.append(f"{key}={got} ({where}), expected {key}={want}")
    return problems


def library_problems(process: ServingProcess, probe: LaneProbe) -> list[str]:
    """What differs between the libnccl the process maps and the pinned one."""
    pinned_path, pinned_sha256 = probe.library_path, probe.library_sha256
    if not process.libraries:
        return ["maps no libnccl (NCCL not loaded yet, or linked statically)"]
    problems: list[str] = []
    for mapped in process.libraries:
        if mapped.path != pinned_path:
            problems.append(f"maps {mapped.path}, not the pinned {pinned_path}")
            continue
        if mapped.deleted:
            problems.append(f"maps a deleted {mapped.path} (replaced after the process started)")
            continue
        digest = process.library_sha256.get(mapped.path)
        if digest is None:
            problems.append(f"{mapped.path} unreadable through /proc/{process.pid}/root")
        elif digest != pinned_sha256:
            problems.append(f"{mapped.path} in its mount namespace has sha256 {digest}, "
                            f"pinned {pinned_sha256}")
    return problems


def affinity_problems(process: ServingProcess, probe: LaneProbe) -> list[str]:
    """The process's CPUs when they are not the serving slice's."""
    want = probe.slice_cpus
    if process.cpus is None:
        return [process.errors.get("status", "Cpus_allowed_list unreadable")]
    if process.cpus != want:
        have = format_cpu_list(process.cpus)
        return [f"Cpus_allowed_list {have}, the slice allows {format_cpu_list(want)}"]
    return []


def cgroup_problems(process: ServingProcess, probe: LaneProbe) -> list[str]:
    """The process's cgroup when it is not under the serving slice."""
    if process.cgroup is None:
        return [process.errors.get("cgroup", "cgroup unreadable")]
    if probe.slice_name not in process.cgroup.slices():
        where = process.cgroup.unified if process.cgroup.unified is not None else "no cgroup v2 path"
        return [f"cgroup {where} is outside {probe.slice_name}"]
    return []


CHECKS = {
    "nccl_env": (nccl_env_problems, "the process's NCCL settings equal the baseline's",
                 "set them where the process reads them: unset the environment override, bind-mount "
                 "/etc/nccl.conf into the container"),
    "nccl_library": (library_problems, "the pinned libnccl (path and sha256)",
                     "load the site's library: bind-mount it and point LD_LIBRARY_PATH at it; "
                     "no image-private libnccl"),
    "affinity": (affinity_problems, "the serving slice's CPUs",
                 "start the lane in the serving slice (Slice= in its unit, or --cpuset-cpus)"),
    "cgroup": (cgroup_problems, "under the serving slice",
               "start the lane in the serving slice (Slice= in its unit, --cgroup-parent)"),
}


def runtime_results(node: str, probes: Iterable[LaneProbe], facts: NodeFacts) -> list[CheckResult]:
    """Every runtime check of every lane on `node` (skips for a lane not running there)."""
    results: list[CheckResult] = []
    for probe in probes:
        running = [p for p in facts.serving if p.matches(probe.match)]
        if not running:
            results.append(_result(node, "running", probe.lane, "skip", None,
                                   f"no process matches {' '.join(probe.match)}"))
            continue
        for kind in KINDS:
            judge, expected, fix = CHECKS[kind]
            found = [f"pid {p.pid}: {problem}" for p in running for problem in judge(p, probe)]
            observed = "; ".join(found) if found else ", ".join(f"pid {p.pid}" for p in running)
            results.append(_result(node, kind, probe.lane, "fail" if found else "pass", expected, observed,
                                   fix if found else None))
    return results
