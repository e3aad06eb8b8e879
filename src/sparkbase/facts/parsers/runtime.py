"""A serving process as the host's /proc shows it: status, cgroup, maps, environ, cmdline.

Each parser reads one /proc/PID file as the kernel prints it (samples in
`tests/fixtures/real/proc_PID_*`); `parse_probe` reads the runtime section of the fact
script, where every file is hex-dumped (`od -An -v -tx1`) so that no byte a process puts
in its own command line or environment can forge a record boundary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkbase.facts.parsers.cpuset import parse_cpu_list
from sparkbase.facts.parsers.lines import node_lines


def parse_status_cpus(text: str) -> frozenset[int]:
    """`/proc/PID/status` → the CPUs the process may run on (`Cpus_allowed_list`)."""
    for line in node_lines(text):
        key, sep, value = line.partition(":")
        if sep and key == "Cpus_allowed_list":
            return parse_cpu_list(value)
    raise ValueError("no Cpus_allowed_list line in /proc/PID/status")


def parse_status_ppid(text: str) -> int:
    """`/proc/PID/status` → the parent's PID (`PPid`; 0 for a process whose parent is in
    another PID namespace, or for PID 1)."""
    for line in node_lines(text):
        key, sep, value = line.partition(":")
        if sep and key == "PPid" and value.strip().isdigit():
            return int(value.strip())
    raise ValueError("no PPid line in /proc/PID/status")


@dataclass(frozen=True)
class ProcCgroup:
    """`/proc/PID/cgroup`: the cgroup v2 path (`0::PATH`) and any v1 hierarchies' paths."""

    unified: str | None
    v1: dict[str, str] = field(default_factory=dict)

    def slices(self) -> tuple[str, ...]:
        """The `.slice` components of the v2 path, outermost first (systemd's tree)."""
        if self.unified is None:
            return ()
        return tuple(part for part in self.unified.split("/") if part.endswith(".slice"))

    @property
    def unit_path(self) -> str | None:
        """The path that names the process's unit or container: the v2 path, else (cgroup
        v1 only) systemd's named hierarchy; None at the root, which is nobody's unit (PID 1,
        kernel threads and anything started outside systemd's tree share it)."""
        path = self.unified if self.unified is not None else self.v1.get("name=systemd")
        return None if path in (None, "", "/") else path

    def holds(self, other: ProcCgroup) -> bool:
        """Whether `other` is in this cgroup or below it in every hierarchy (a container's
        or unit's subtree: the processes it runs, in sub-cgroups too). A root cgroup holds
        nothing: it is not a unit (`unit_path`)."""
        if self.unit_path is None or set(self.v1) != set(other.v1):
            return False
        pairs = [(self.unified, other.unified), *((path, other.v1[key]) for key, path in self.v1.items())]
        return all(_under(theirs, mine) for mine, theirs in pairs)


def _under(path: str | None, top: str | None) -> bool:
    if top is None or path is None:
        return top is None and path is None
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def parse_cgroup(text: str) -> ProcCgroup:
    """`hierarchy-ID:controllers:path` lines; ID 0 with no controllers is cgroup v2."""
    unified: str | None = None
    v1: dict[str, str] = {}
    for line in node_lines(text):
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            raise ValueError(f"not a /proc/PID/cgroup line: {line!r}")
        number, controllers, path = parts
        if number == "0" and controllers == "":
            unified = path
        else:
            v1[controllers] = path
    if unified is None and not v1:
        raise ValueError("empty /proc/PID/cgroup")
    return ProcCgroup(unified, v1)


@dataclass(frozen=True)
class MappedFile:
    """A file mapped into a process (`/proc/PID/maps`), as the process's root sees it."""

    path: str
    deleted: bool = False


#: a libnccl file name that carries its full version (`make` in NCCL's source tree and the
#: Debian libnccl2 package install `libnccl.so.2.28.9`, with `libnccl.so.2` a link to it)
_NCCL_FILE_VERSION = re.compile(r"^libnccl\.so\.(?P<version>[0-9]+\.[0-9]+\.[0-9]+)$")


def nccl_file_version(path: str) -> str | None:
    """The NCCL version a mapped library's file name tells (`/…/libnccl.so.2.30.7` → 2.30.7);
    None when the name tells none (`libnccl.so.2`, as pip's nvidia-nccl wheels ship it)."""
    match = _NCCL_FILE_VERSION.match(path.rsplit("/", 1)[-1])
    return match.group("version") if match else None


_MAPS_LINE = re.compile(
    r"^[0-9a-f]+-[0-9a-f]+ [r-][w-][x-][ps] [0-9a-f]+ [0-9a-f]+:[0-9a-f]+ \d+\s*(?P<path>.*)$"
)


def parse_maps_files(text: str, basename_prefix: str = "libnccl") -> tuple[MappedFile, ...]:
    """Files whose name starts with `basename_prefix` mapped by the process, each once, in
    map order; `(deleted)` marks a file replaced or removed after it was mapped."""
    found: dict[str, MappedFile] = {}
    for line in node_lines(text):
        match = _MAPS_LINE.match(line)
        if match is None:
            raise ValueError(f"not a /proc/PID/maps line: {line!r}")
        path = match["path"]
        deleted = path.endswith(" (deleted)")
        if deleted:
            path = path[: -len(" (deleted)")]
        if path.startswith("/") and path.rsplit("/", 1)[-1].startswith(basename_prefix):
            found.setdefault(path, MappedFile(path, deleted))
    return tuple(found.values())


def parse_environ(raw: str) -> dict[str, str]:
    """`/proc/PID/environ` (NUL-separated `KEY=value`) → variables; the first wins, as getenv."""
    env: dict[str, str] = {}
    for entry in raw.split("\0"):
        key, sep, value = entry.partition("=")
        if sep and key and key not in env:
            env[key] = value
    return env


def parse_cmdline_args(raw: str) -> tuple[str, ...]:
    """`/proc/PID/cmdline` (NUL-terminated arguments) → the arguments."""
    return tuple(raw.rstrip("\0").split("\0")) if raw.strip("\0") else ()


@dataclass
class ProbeRecords:
    """One process's files from the runtime section: name → text (None: unreadable), and
    the sha256 of each mapped library read through the process's root."""

    files: dict[str, str | None] = field(default_factory=dict)
    hashes: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolAnswer:
    """A tool's answer in the runtime section (`@tool NAME KIND`): its stdout and stderr
    together, and its exit status (127: the tool is not on the node's PATH)."""

    text: str
    status: int


@dataclass
class RuntimeRecords:
    """The runtime section: each process's records, and the tools' answers by (tool, kind)."""

    processes: dict[int, ProbeRecords] = field(default_factory=dict)
    tools: dict[tuple[str, str], ToolAnswer] = field(default_factory=dict)


_RECORD = re.compile(r"^@(?P<kind>file|hash|tool) (?P<pid>\d+|[a-z]+) (?P<name>\S+)$")


def _unhex(lines: list[str]) -> str:
    data = bytes.fromhex("".join("".join(lines).split()))
    return data.decode("utf-8", errors="replace")


def parse_runtime_section(text: str) -> RuntimeRecords:
    """The runtime section → records per PID, and the tools' answers.

    Records: `@file PID NAME`, `@hash PID HEXPATH` or `@tool TOOL KIND`, then hex lines,
    then `@rc N` (for a hash record, the hex lines are `sha256sum`'s output on stdin; for a
    tool, its output). Anything else is refused.
    """
    out = RuntimeRecords()
    current: tuple[str, str, str] | None = None
    body: list[str] = []
    for line in node_lines(text):
        if not line.strip():
            continue
        header = _RECORD.match(line)
        if header is not None and (header["kind"] == "tool") != header["pid"].isdigit():
            current = (header["kind"], header["pid"], header["name"])
            body = []
            continue
        if line.startswith("@rc "):
            if current is None:
                raise ValueError("a record end with no record")
            kind, who, name = current
            status = line[4:].strip()
            ok = status == "0"
            if kind == "tool":
                out.tools[(who, name)] = ToolAnswer(_unhex(body), int(status) if status.isdigit() else -1)
            elif kind == "file":
                out.processes.setdefault(int(who), ProbeRecords()).files[name] = _unhex(body) if ok else None
            else:
                path = _unhex([name])
                digest = " ".join(body).split()
                valid = ok and bool(digest) and re.fullmatch(r"[0-9a-f]{64}", digest[0]) is not None
                out.processes.setdefault(int(who), ProbeRecords()).hashes[path] = digest[0] if valid else None
            current = None
            continue
        if current is None or not re.fullmatch(r"[0-9a-f ]+", line.strip()):
            raise ValueError(f"unexpected line in the runtime section: {line[:80]!r}")
        body.append(line)
    return out


def parse_probe(text: str) -> dict[int, ProbeRecords]:
    """The runtime section → records per PID (`parse_runtime_section`'s processes)."""
    return parse_runtime_section(text).processes
