"""Serving engines found on the nodes, as lanes (pure).

The fact script's runtime section, asked for every process whose command line holds
`sglang` or `vllm` (`ENGINE_MATCHES`), gives each such process, its cgroup's and its
descendants. An engine's server is the process whose arguments hold its entry point
(`-m sglang.launch_server`, `vllm serve`, `-m vllm.entrypoints.openai.api_server`); its
model is `--model-path`/`--model` (SGLang) or the argument after `serve` (vLLM). The same
engine and model on several nodes is one lane. What it runs as comes from the server's
cgroup: a `.service` unit, or a container (`ServingProcess.container_id` and the node's
`containers`, read with `docker inspect`); the NCCL settings and library are what the
lane's processes that map a libnccl load (`ServingProcess.nccl_setting`, the environment
first, then the nccl.conf files NCCL reads in them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sparkbase.audit.runtime import NCCL_DEFAULTS
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.docker import Container
from sparkbase.facts.runtime import ServingProcess, lane_group

#: what the runtime probe searches command lines for: every engine sparkbase knows
ENGINE_MATCHES = ("sglang", "vllm")
#: the port each engine's API (and, where enabled, /metrics) listens on without `--port`
DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}
#: systemd's own slices: a process under only these is in no serving slice (Docker puts its
#: containers' scopes in system.slice)
SYSTEMD_SLICES = frozenset({"system.slice", "user.slice", "machine.slice"})
_COMMAND_TEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:=+@-]{0,119}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Server:
    """An engine's server process on one node."""

    node: str
    engine: str  # sglang | vllm
    entry: str  # the entry point as a match string
    model: str
    port: int
    metrics: bool
    node_rank: int | None
    process: ServingProcess


@dataclass(frozen=True)
class FoundContainer:
    """The container a lane runs in: its name and the image pinned by digest (None: the
    image has no digest to pin, said in the lane's notes)."""

    name: str
    image: str | None


@dataclass(frozen=True)
class FoundLane:
    """One serving engine found on one or more nodes."""

    name: str
    engine: str
    model: str
    nodes: tuple[str, ...]  # rank order
    match: tuple[str, ...]
    head: str  # the node whose API answers
    port: int
    metrics: bool
    unit: str | None
    container: FoundContainer | None
    nccl: dict[str, str]  # NCCL_* -> the value every process of the lane loads
    library: tuple[str, str] | None  # (host path, sha256) every process maps
    notes: tuple[str, ...] = ()
    #: the CPUs every process of the lane may use, when they agree (None: they differ, or
    #: unread); `in_slice` whether they run under a systemd slice other than Docker's scopes
    cpus: frozenset[int] | None = None
    in_slice: bool = True


def _option(args: Sequence[str], *names: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` (the first given)."""
    for index, arg in enumerate(args):
        for name in names:
            if arg == name and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and len(text) < 6 else None


def server_of(node: str, process: ServingProcess) -> Server | None:
    """The engine server `process` is, or None (a worker, a helper, another program)."""
    args = process.args
    engine = entry = model = None
    if "sglang.launch_server" in args:
        engine, entry = "sglang", "sglang.launch_server"
        model = _option(args, "--model-path", "--model")
    elif "vllm.entrypoints.openai.api_server" in args:
        engine, entry = "vllm", "vllm.entrypoints.openai.api_server"
        model = _option(args, "--model")
    else:
        for index, arg in enumerate(args[:-1]):
            if arg.rsplit("/", 1)[-1] == "vllm" and args[index + 1] == "serve":
                engine, entry = "vllm", "vllm"
                rest = args[index + 2 :]
                model = rest[0] if rest and not rest[0].startswith("-") else _option(args, "--model")
                break
    if engine is None or entry is None or not model:
        return None
    port = _int(_option(args, "--port")) or DEFAULT_PORTS[engine]
    metrics = engine == "vllm" or "--enable-metrics" in args
    return Server(node, engine, entry, model, port, metrics, _int(_option(args, "--node-rank")), process)


def _match(server: Server) -> tuple[str, ...]:
    """The entry point and the model (as given, else its last part) as match strings."""
    strings = [server.entry]
    for candidate in (server.model, server.model.rstrip("/").rsplit("/", 1)[-1]):
        if _COMMAND_TEXT.match(candidate):
            strings.append(candidate)
            break
    return tuple(strings)


def _unit(process: ServingProcess) -> str | None:
    """The `.service` unit whose cgroup holds the process, if any."""
    path = process.cgroup.unit_path if process.cgroup is not None else None
    parts = [part for part in (path or "").split("/") if part.endswith(".service")]
    return parts[-1] if parts else None


def _container(process: ServingProcess, facts: NodeFacts) -> Container | None:
    container_id = process.container_id
    return facts.containers.get(container_id) if container_id is not None else None


def pinned_image(container: Container) -> str | None:
    """The container's image as `repo@sha256:…`: its reference when it is pinned already,
    else the image's repo digest for the reference's repository (the only one, or the one
    whose repository the reference names); None when the image has no digest."""
    ref = container.image_ref
    if _DIGEST.search(ref):
        return ref
    repository = ref.split("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    same = [digest for digest in container.repo_digests if digest.split("@", 1)[0] == repository]
    if same:
        return sorted(same)[0]
    return container.repo_digests[0] if len(container.repo_digests) == 1 else None


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._").lower()
    return slug[:63] or "lane"


def _lane_name(engine: str, model: str, unit: str | None, container: FoundContainer | None) -> str:
    """The container's name, else the unit's (less `lane-` and `.service`), else the
    model's last part and the engine."""
    if container is not None and _NAME.match(container.name):
        return container.name
    if unit is not None:
        stem = unit.removesuffix(".service").removeprefix("lane-")
        if _NAME.match(stem):
            return stem
    return _slug(f"{model.rstrip('/').rsplit('/', 1)[-1]}-{engine}")


def _agreed(values: dict[str, str], what: str, notes: list[str]) -> str | None:
    """The one value every node agrees on; else the first node's, said in `notes`."""
    distinct = sorted(set(values.values()))
    if len(distinct) > 1:
        shown = "; ".join(f"{node}: {value}" for node, value in values.items())
        notes.append(f"{what} differs between nodes ({shown}); {next(iter(values.values()))} written")
    return next(iter(values.values()), None)


def _nccl(processes: Sequence[ServingProcess], notes: list[str]) -> dict[str, str]:
    """NCCL_* -> the value NCCL uses in every process (environment, then nccl.conf files)."""
    keys = {key for p in processes for key in (p.environ or {}) if key.startswith("NCCL_")}
    keys |= {key for p in processes for conf in p.conf_files()
             for key in (a.name for a in conf.conf.assignments) if key.startswith("NCCL_")}
    keys |= set(NCCL_DEFAULTS)
    settings: dict[str, str] = {}
    for key in sorted(keys):
        values = {p.nccl_setting(key, NCCL_DEFAULTS.get(key))[0] for p in processes}
        if len(values) > 1:
            shown = ", ".join(sorted(map(str, values)))
            notes.append(f"{key} differs between the lane's processes ({shown})")
        value = sorted(str(v) for v in values if v is not None)
        if value:
            settings[key] = value[0]
    return settings


def _library(processes: Sequence[tuple[ServingProcess, Container | None]],
             notes: list[str]) -> tuple[str, str] | None:
    """(host path, sha256) of the libnccl every process maps, when they agree: a path inside
    a container is the host file a bind mount puts there (`Container.host_path`)."""
    def host(process: ServingProcess, container: Container | None, path: str) -> str:
        found = container.host_path(path) if container is not None else None
        return found or path

    found = {(host(p, c, lib.path), p.library_sha256.get(lib.path))
             for p, c in processes for lib in p.libraries}
    if len(found) != 1:
        if len(found) > 1:
            notes.append("the lane's processes map different NCCL libraries: "
                         + ", ".join(sorted(f"{path} ({sha or 'unread'})" for path, sha in found)))
        return None
    path, sha = found.pop()
    return (path, sha) if sha is not None else None


def find_lanes(facts: Mapping[str, NodeFacts], ranks: Sequence[str]) -> tuple[FoundLane, ...]:
    """Every engine serving on the nodes, one lane per (engine, model), by name (pure)."""
    servers: dict[tuple[str, str], dict[str, Server]] = {}
    for node in ranks:
        if node not in facts:
            continue
        for process in facts[node].serving:
            server = server_of(node, process)
            if server is not None:
                servers.setdefault((server.engine, server.model), {}).setdefault(node, server)
    lanes: list[FoundLane] = []
    taken: set[str] = set()
    for (engine, model), by_node in sorted(servers.items()):
        lane = _lane(engine, model, by_node, facts)
        name, n = lane.name, 2
        while name in taken:
            name, n = f"{lane.name}-{n}", n + 1
        taken.add(name)
        lanes.append(FoundLane(**{**lane.__dict__, "name": name}))
    return tuple(sorted(lanes, key=lambda lane: lane.name))


def _lane(engine: str, model: str, by_node: dict[str, Server], facts: Mapping[str, NodeFacts]) -> FoundLane:
    notes: list[str] = []
    nodes = tuple(by_node)  # rank order (find_lanes walks the ranks)
    first = by_node[nodes[0]]
    head = next((node for node, s in by_node.items() if s.node_rank == 0), nodes[0])
    match = _match(first)
    units = {node: _unit(s.process) or "" for node, s in by_node.items()}
    unit = _agreed(units, "the unit", notes) or None
    containers: dict[str, str] = {}
    images: dict[str, str] = {}
    for node, server in by_node.items():
        container = _container(server.process, facts[node])
        if container is not None:
            containers[node] = container.name
            images[node] = pinned_image(container) or f"{container.image_ref} (no digest)"
    found: FoundContainer | None = None
    if containers:
        name = _agreed(containers, "the container name", notes) or ""
        image = _agreed(images, "the container image", notes) or ""
        found = FoundContainer(name, None if image.endswith("(no digest)") else image)
        if found.image is None:
            notes.append(f"the image {image} has no digest to pin it by")
        unit = None
    processes: list[ServingProcess] = []
    housed: list[tuple[ServingProcess, Container | None]] = []
    members: list[ServingProcess] = []
    for node, server in by_node.items():
        group = lane_group(facts[node].serving, match)
        users = group.nccl_users or tuple(p for p in group.members if p.pid == server.process.pid)
        processes.extend(users)
        housed.extend((p, _container(p, facts[node])) for p in users)
        members.extend(group.members)
    nccl = _nccl([p for p in processes if p.maps_nccl] or processes, notes)
    library = _library(housed, notes)
    cpu_sets = {p.cpus for p in members if p.cpus is not None}
    cpus = cpu_sets.pop() if len(cpu_sets) == 1 else None
    in_slice = all(p.cgroup is not None and any(s not in SYSTEMD_SLICES for s in p.cgroup.slices())
                   for p in members)
    ports = {node: str(s.port) for node, s in by_node.items()}
    port = int(_agreed(ports, "the API port", notes) or DEFAULT_PORTS[engine])
    return FoundLane(
        name=_lane_name(engine, model, unit, found), engine=engine, model=model, nodes=nodes,
        match=match, head=head, port=port, metrics=first.metrics, unit=unit, container=found,
        nccl=nccl, library=library, notes=tuple(notes), cpus=cpus, in_slice=in_slice,
    )


def lanes_on(lanes: Iterable[FoundLane], node: str) -> list[FoundLane]:
    """The lanes that run on `node`."""
    return [lane for lane in lanes if node in lane.nodes]
