"""Runtime checks: what a lane's serving processes actually load, against the lane's baseline.

Pure: the lanes to look for and a node's facts in (`NodeFacts.serving`, read from the
host's /proc in the fact script's round trip), one `CheckResult` per lane and check out.
A lane's processes on a node are its group (`facts.runtime.lane_group`): the processes
whose command line holds the lane's match strings, every process of their cgroup (the
unit's or container's) and every descendant (the engine's workers). Each failure names
the PID and what differs:

- `runtime.running`: the lane has a process on the node. A lane that must serve there (the
  lane a pre-flight or `lane switch` judges, the proxy's active lane in an audit) fails as
  "not serving" when it has none; any other lane is idle there (skip), unless its container
  runs (Docker says so) with no process matching: then the match strings are wrong (fail);
- `runtime.container` (a lane run as a container): every process of the lane runs in the
  container the lane names, and that container runs the image the lane pins by digest
  (`policy.images.pin_problem`); docker not found, or not answering, fails it;
- `runtime.nccl_env`: the NCCL settings every process that maps libnccl would use (its
  environment as it was started, else the nccl.conf files its own mount namespace shows,
  read by NCCL's rules, else NCCL's default) equal the baseline's for the lane's shape
  (`nccl.settings` with `nccl.shapes.<shape>`); and no nccl.conf it
  reads sets a key twice with different values or under a name with spaces (NCCL's
  reading differs from a person's);
- `runtime.nccl_library`: the libnccl each of them maps is the pinned path and sha256; for a
  library built into the lane's image (`provided_by: image`), the NCCL version its file
  name tells (`libnccl.so.2.30.7`) is the pinned one, and a name that tells none is said so;
- `runtime.affinity`: every process of the lane runs on the serving slice's CPUs;
- `runtime.cgroup`: every process of the lane is under the serving slice.

What cannot be seen from outside: a variable the process sets in itself after it started
(`os.environ[...] = ...` before NCCL initialises) is not in /proc/PID/environ. The checks
say so in their text; NCCL's own log (`NCCL_DEBUG=INFO`, subsystem ENV) is where the
effective value shows (docs/runtime.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbase.audit.registry import CheckResult
from sparkbase.facts.parsers.cpuset import format_cpu_list
from sparkbase.facts.parsers.runtime import nccl_file_version
from sparkbase.facts.runtime import LaneGroup, lane_group
from sparkbase.model.images import parse_reference, short_digest
from sparkbase.policy.images import pin_problem, running_digests

if TYPE_CHECKING:
    from sparkbase.facts.model import NodeFacts
    from sparkbase.facts.parsers.docker import Container
    from sparkbase.facts.runtime import ServingProcess
    from sparkbase.model.site import Site

#: NCCL's built-in defaults for the settings a baseline pins, where one exists (src/misc
#: and src/transport/net_ib.cc NCCL_PARAM defaults); a setting absent here has none
NCCL_DEFAULTS = {"NCCL_IB_MERGE_NICS": "1"}
#: the runtime checks, in the order they are reported
KINDS = ("nccl_env", "nccl_library", "affinity", "cgroup")
#: what a container lane's processes run in, and from which image
CONTAINER_EXPECTED = "every process of the lane in container {name}, running {image}"
CONTAINER_FIX = ("start the lane as `docker run --name {name} ... {image}` (the image by its digest), "
                 "or correct runtime.container in the lane file")


@dataclass(frozen=True)
class LaneProbe:
    """A lane to look for on a node: its name, how to find it (every `match` string in the
    command line), and what its baseline needs of the process."""

    lane: str
    match: tuple[str, ...]
    #: the NCCL settings the baseline pins for the lane's shape, as environment variables
    #: (`NcclSpec.env_for`)
    nccl_env: tuple[tuple[str, str], ...]
    #: the pinned host library (None for one built into the lane's image: `provided_by: image`)
    library_path: str | None
    library_sha256: str | None
    slice_cpus: frozenset[int]
    slice_name: str | None  # None: the lane's container holds its CPUs (cpuset.pinned_by: container)
    #: the lane must be serving on the node (its pre-flight, or the proxy's active lane):
    #: no process there is a failure, not an idle lane
    required: bool = False
    #: the Docker container the lane runs as, and the image it must run (pinned by digest);
    #: None: the lane is not run as a container
    container: str | None = None
    image: str | None = None
    #: the NCCL version an image's library must report in its file name (None: not pinned)
    library_version: str | None = None
    #: NCCL keys the baseline's other shapes set and the lane's shape leaves at NCCL's
    #: default: a process must not set them (the triangle's "no switchless setting")
    nccl_unset: tuple[str, ...] = ()
    #: the lane's shape (what `nccl_env` is the settings of)
    shape: str | None = None


def lane_probe(site: Site, name: str) -> LaneProbe | None:
    """How to find lane `name`'s serving processes and what they must load; None when the
    lane has no runtime block (or no baseline)."""
    lane = site.lanes[name]
    baseline = site.baselines.get(lane.baseline)
    if lane.runtime is None or baseline is None:
        return None
    container = lane.runtime.container
    env = baseline.nccl.env_for(lane.shape)
    others = {key for shape in baseline.nccl.shaped() for key in baseline.nccl.env_for(shape)}
    return LaneProbe(
        lane=name,
        match=tuple(lane.runtime.match),
        nccl_env=tuple(env.items()),
        nccl_unset=tuple(sorted(others - set(env))),
        shape=lane.shape,
        library_path=baseline.nccl.library.path,
        library_sha256=baseline.nccl.library.sha256,
        library_version=baseline.nccl.library.version if not baseline.nccl.library.on_host() else None,
        slice_cpus=frozenset(baseline.cpuset.cpus),
        slice_name=baseline.cpuset.slice if baseline.cpuset.pinned_by == "slice" else None,
        container=container.name if container is not None else None,
        image=container.image if container is not None else None,
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


def first_matches(probes: Iterable[LaneProbe]) -> tuple[str, ...]:
    """The strings the node searches command lines for (each lane's first)."""
    return tuple(sorted({probe.match[0] for probe in probes}))


def container_names(probes: Iterable[LaneProbe]) -> tuple[str, ...]:
    """The containers the node asks docker about by name (each container lane's)."""
    return tuple(sorted({probe.container for probe in probes if probe.container is not None}))


def _result(node: str, check: str, lane: str, status: str, expected: str | None,
            observed: str | None, fix: str | None = None) -> CheckResult:
    return CheckResult(f"runtime.{check}.{lane}", "runtime", "error", node,
                       status, expected, observed, fix)  # type: ignore[arg-type]


def nccl_env_problems(process: ServingProcess, probe: LaneProbe) -> list[str]:
    """`NCCL_X=got (from where), expected want` for every setting that differs, then every
    line of an nccl.conf it reads that NCCL reads otherwise than a person would
    (`conf_problems`)."""
    problems: list[str] = []
    for key, want in probe.nccl_env:
        got, where = process.nccl_setting(key, NCCL_DEFAULTS.get(key))
        if got != want:
            if got is None:
                problems.append(f"{key} unset (not in its environment nor any nccl.conf it reads), "
                                f"expected {key}={want}")
            else:
                problems.append(f"{key}={got} ({where}), expected {key}={want}")
    for key in probe.nccl_unset:
        got, where = process.nccl_setting(key, None)
        if got is not None:
            problems.append(f"{key}={got} ({where}), expected unset (shape {probe.shape} sets none)")
    return problems + conf_problems(process)


def conf_problems(process: ServingProcess) -> list[str]:
    """Lines of the nccl.conf files the process's NCCL reads where NCCL's reading differs
    from a plain one (last line wins, spaces trimmed): a key set twice with different
    values (NCCL keeps the FIRST), and a name with spaces around it (`KEY = v` sets a
    variable called `KEY `, which NCCL never reads)."""
    problems: list[str] = []
    for conf in process.conf_files():
        for name, lines in conf.conf.duplicates().items():
            if len({line.value for line in lines}) > 1:
                where = ", ".join(f"line {line.line}: {line.value!r}" for line in lines)
                problems.append(f"{conf.label} sets {name} twice with different values ({where}); "
                                f"NCCL uses the first, {lines[0].value!r}")
        for assignment in conf.conf.assignments:
            if assignment.name != assignment.name.strip():
                problems.append(f"{conf.label} line {assignment.line} sets {assignment.name!r} (spaces are "
                                f"part of the name for NCCL): NCCL does not read it as "
                                f"{assignment.name.strip()}")
    return problems


def conf_notes(process: ServingProcess) -> list[str]:
    """Keys an nccl.conf the process reads sets twice with the same value (no effect on
    NCCL, but a later edit of one line would silently not take effect)."""
    notes: list[str] = []
    for conf in process.conf_files():
        for name, lines in conf.conf.duplicates().items():
            if len({line.value for line in lines}) == 1:
                numbers = ", ".join(str(line.line) for line in lines)
                notes.append(f"{conf.label} sets {name} twice (lines {numbers}, same value; NCCL reads "
                             "the first: an edit of a later line has no effect)")
    return notes


def library_problems(process: ServingProcess, probe: LaneProbe,
                     container: Container | None = None) -> list[str]:
    """What differs between the libnccl the process maps and the pinned one. In a container,
    the path the process maps is the container's: it is the pinned host file when a bind
    mount puts that file there (`Container.host_path`)."""
    pinned_path, pinned_sha256 = probe.library_path, probe.library_sha256
    if not process.libraries:
        return ["maps no libnccl (NCCL not loaded yet, or linked statically)"]
    if pinned_path is None or pinned_sha256 is None:
        return image_library_problems(process, probe)
    problems: list[str] = []
    for mapped in process.libraries:
        host = container.host_path(mapped.path) if container is not None else None
        if mapped.path != pinned_path and host != pinned_path:
            where = f" (bind-mounted from {host})" if host is not None else ""
            problems.append(f"maps {mapped.path}{where}, not the pinned {pinned_path}")
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


def image_library_problems(process: ServingProcess, probe: LaneProbe) -> list[str]:
    """A library built into the lane's image: the NCCL version each mapped libnccl's file
    name tells (`libnccl.so.2.30.7`) against the pinned one; none pinned, nothing to judge."""
    if probe.library_version is None:
        return []
    problems: list[str] = []
    for mapped in process.libraries:
        seen = nccl_file_version(mapped.path)
        if seen is not None and not _same_version(seen, probe.library_version):
            problems.append(f"maps {mapped.path}: NCCL {seen}, pinned {probe.library_version}")
    return problems


def image_library_notes(process: ServingProcess, probe: LaneProbe) -> list[str]:
    """What a check of an image's library read: the version each mapped libnccl tells, or
    that its file name does not tell one."""
    notes: list[str] = []
    for mapped in process.libraries:
        seen = nccl_file_version(mapped.path)
        notes.append(f"maps {mapped.path} (NCCL {seen}, from its file name)" if seen is not None else
                     f"maps {mapped.path}: its file name tells no NCCL version, so the version is not judged"
                     + (f" (pinned {probe.library_version})" if probe.library_version else ""))
    return notes


def _same_version(seen: str, pinned: str) -> bool:
    """`2.30.7` from a file name is the pinned `2.30.7`, or `2.30.7-1+cuda13.0` (a package's)."""
    return pinned == seen or pinned.startswith((seen + "-", seen + "+"))


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
    if probe.slice_name is not None and probe.slice_name not in process.cgroup.slices():
        where = process.cgroup.unified if process.cgroup.unified is not None else "no cgroup v2 path"
        return [f"cgroup {where} is outside {probe.slice_name}"]
    return []


#: what the environment a check reads is, and what it cannot see
ENVIRON_NOTE = ("environment as read from /proc/PID/environ at start; a value the process sets "
                "in itself later is not visible")

CHECKS = {
    "nccl_env": (nccl_env_problems, "the NCCL settings of every lane process that maps libnccl equal the "
                 f"baseline's, and its nccl.conf files read alike by NCCL and a person ({ENVIRON_NOTE})",
                 "set them where the process reads them: unset the environment override, keep one line per "
                 "key with no spaces around '=' in nccl.conf, bind-mount /etc/nccl.conf into the container"),
    "nccl_library": (library_problems,
                     "the pinned libnccl (path and sha256) in every lane process that maps one",
                     "load the site's library: bind-mount it and point LD_LIBRARY_PATH at it; "
                     "no image-private libnccl"),
    "affinity": (affinity_problems, "the serving slice's CPUs for every process of the lane",
                 "start the lane in the serving slice (Slice= in its unit, or --cpuset-cpus)"),
    "cgroup": (cgroup_problems, "every process of the lane under the serving slice",
               "start the lane in the serving slice (Slice= in its unit, --cgroup-parent)"),
}
#: the checks judged on the processes that map libnccl (the others: on every process)
NCCL_KINDS = ("nccl_env", "nccl_library")


def _pids(processes: Iterable[ServingProcess]) -> str:
    return ", ".join(f"pid {p.pid}" for p in processes)


def lane_container(facts: NodeFacts, name: str) -> Container | None:
    """The container called `name` on the node, as docker showed it (None: not shown)."""
    return next((c for c in facts.containers.values() if c.name == name), None)


def _where_it_runs(probe: LaneProbe, group: LaneGroup, facts: NodeFacts) -> str:
    """`container NAME (id), image REPO@DIGEST`, for the processes' containers; empty when
    none of them runs in one."""
    found = [facts.containers.get(cid) for cid in sorted({p.container_id for p in group.matched
                                                            if p.container_id is not None})]
    parts: list[str] = []
    for container in found:
        if container is None:
            continue
        digests = running_digests(container, parse_reference(probe.image)) if probe.image else []
        image = f"{container.image_ref or container.image_id}"
        if digests and digests[0] not in image:
            image += f" ({short_digest(digests[0])})"
        parts.append(f"container {container.name} ({container.id[:12]}), image {image}")
    return "; ".join(parts)


def _running(node: str, probe: LaneProbe, group: LaneGroup, facts: NodeFacts) -> CheckResult:
    """The lane has a process on the node: pass naming what is judged (and the container
    and image it runs in); else a failure ("not serving") when it must serve there, or when
    its container runs with no process matching (the match strings are wrong), a skip
    (idle) when not."""
    match = " ".join(probe.match)
    if not group.serving:
        container = lane_container(facts, probe.container) if probe.container is not None else None
        if container is not None and container.running:
            return _result(node, "running", probe.lane, "fail", f"a process of lane {probe.lane} "
                           f"(command line holding {match})",
                           f"container {container.name} is running but no process matches {match}",
                           "correct runtime.match in the lane file (the strings must all be in the command "
                           "line of the engine's server, as /proc/PID/cmdline shows it)")
        if probe.required:
            return _result(node, "running", probe.lane, "fail", f"a process of lane {probe.lane} "
                           f"(command line holding {match})", f"not serving: no process matches {match}",
                           f"start the lane on {node} (its unit or container) before it takes traffic")
        return _result(node, "running", probe.lane, "skip", None,
                       f"idle: no process matches {match} (not a lane that must serve now)")
    where = ", ".join(group.cgroups) or "no cgroup of its own"
    matched = {p.pid for p in group.matched}
    workers = [p for p in group.members if p.pid not in matched]
    observed = (f"{_pids(group.matched)} (command line), {len(workers)} more in its cgroup or below it "
                f"({_pids(workers) or 'none'}); cgroup {where}")
    runs_in = _where_it_runs(probe, group, facts)
    if runs_in:
        observed += f"; {runs_in}"
    return _result(node, "running", probe.lane, "pass", f"a process of lane {probe.lane}", observed)


def container_problems(probe: LaneProbe, group: LaneGroup, facts: NodeFacts) -> list[str]:
    """Why the lane's processes do not run in its container from its pinned image (empty:
    they do). Docker's answer is the node's; a container it could not show fails."""
    assert probe.container is not None and probe.image is not None
    name = probe.container
    container = lane_container(facts, name)
    if container is None:
        why = facts.container_errors.get(name, "docker was not asked about it")
        if why == "no such container":
            return [f"no container named {name} on the node (docker ps -a NAMES)"]
        return [f"cannot read container {name}: {why}"]
    problems: list[str] = []
    outside = [p for p in group.members if p.container_id is None]
    if outside:
        problems.append(f"{_pids(outside)} outside any Docker container (not in container {name})")
    for cid in sorted({p.container_id for p in group.members if p.container_id not in (None, container.id)}):
        assert cid is not None
        pids = _pids(p for p in group.members if p.container_id == cid)
        other = facts.containers.get(cid)
        what = f"container {other.name}" if other is not None else f"container {cid[:12]}"
        problems.append(f"{pids} in {what}, not in the lane's container {name} ({container.id[:12]})")
    if not container.running:
        problems.append(f"container {name} is not running (docker says {container.id[:12]} stopped)")
    pinned = parse_reference(probe.image)
    problem = pin_problem(container, pinned)
    if problem is not None:
        unread = facts.container_errors.get(container.image_id)
        problems.append(problem + (f" (RepoDigests unread: {unread})" if unread else ""))
    return problems


def _container(node: str, probe: LaneProbe, group: LaneGroup, facts: NodeFacts) -> CheckResult:
    """`runtime.container`: the lane's processes in its container, from its pinned image."""
    assert probe.container is not None and probe.image is not None
    expected = CONTAINER_EXPECTED.format(name=probe.container, image=probe.image)
    problems = container_problems(probe, group, facts)
    if problems:
        return _result(node, "container", probe.lane, "fail", expected, "; ".join(problems),
                       CONTAINER_FIX.format(name=probe.container, image=probe.image))
    container = lane_container(facts, probe.container)
    assert container is not None
    digests = running_digests(container, parse_reference(probe.image))
    image = container.image_ref or container.image_id
    if not digests or digests[0] not in image:
        image += f" ({', '.join(digests) or container.image_id})"
    observed = f"{_pids(group.members)} in container {container.name} ({container.id[:12]}), image {image}"
    return _result(node, "container", probe.lane, "pass", expected, observed)


def judged(kind: str, group: LaneGroup) -> tuple[ServingProcess, ...]:
    """The processes check `kind` judges: for NCCL, every member that maps libnccl (when none
    does, the matched ones, whose missing library is then the finding); else every member."""
    if kind in NCCL_KINDS:
        return group.nccl_users or group.matched
    return group.members


def runtime_results(node: str, probes: Iterable[LaneProbe], facts: NodeFacts) -> list[CheckResult]:
    """Every runtime check of every lane on `node` (`runtime.running` first)."""
    results: list[CheckResult] = []
    for probe in probes:
        group = lane_group(facts.serving, probe.match)
        results.append(_running(node, probe, group, facts))
        if not group.serving:
            continue
        if probe.container is not None:
            results.append(_container(node, probe, group, facts))
        for kind in KINDS:
            judge, expected, fix = CHECKS[kind]
            if kind == "cgroup" and probe.slice_name is None:
                results.append(_result(node, kind, probe.lane, "skip", expected,
                                       "no serving slice: the lane's container holds its CPUs "
                                       "(cpuset.pinned_by: container; runtime.affinity judges them)", None))
                continue
            processes = judged(kind, group)
            if kind == "nccl_library":
                found = [f"pid {p.pid}: {problem}" for p in processes for problem in
                         library_problems(p, probe, facts.containers.get(p.container_id or ""))]
            else:
                found = [f"pid {p.pid}: {problem}" for p in processes for problem in judge(p, probe)]
            observed = "; ".join(found) if found else _pids(processes)
            if kind == "nccl_library" and not found and probe.library_path is None:
                observed = "; ".join([f"pid {p.pid}: {note}" for p in processes
                                      for note in image_library_notes(p, probe)] or [observed])
            if kind == "nccl_env" and not found:
                observed = "; ".join([observed, *(f"pid {p.pid}: {note}" for p in processes
                                                  for note in conf_notes(p))])
            results.append(_result(node, kind, probe.lane, "fail" if found else "pass", expected, observed,
                                   fix if found else None))
    return results
