"""Serving processes on a node, read from the host's /proc in the fact script's round trip.

`probe_command` is one section of the fact script. It finds the processes whose command
line holds a lane's first match string (`grep -lF` over /proc/[0-9]*/cmdline), takes each
one's cgroup (the unit's or container's: the lane's identity, `ProcCgroup.unit_path`) and
selects every process in that cgroup or below it, and every descendant of those (the
engine's workers: TP workers and `multiprocessing` spawns, whose command lines do not hold
the match strings). The probe's own shells are left out by PID only: `$$`, its ancestors
(the login shell, sudo, sshd) and its descendants, from one reading of every process's
PPid; never by text, which any process could put in its own arguments. Per selected
process it hex-dumps its cmdline, environ, status, cgroup, the NCCL lines of its maps,
the nccl.conf files NCCL would read inside the process's own mount namespace
(`/proc/PID/root/...`), and the sha256 of every libnccl it maps, read through that root.
Then, in the same round trip, Docker's view of the containers those processes run in (the
ids their cgroups name, at most `MAX_CONTAINERS`) and of the containers the lanes name:
`docker inspect ID... NAME...`, then `docker image inspect` of their images (for the
digests they were pulled by); each answer is capped at `MAX_TOOL_BYTES`. No docker is
asked when there is nothing to ask about. `read_runtime` turns the section into typed
values and `lane_group` picks one lane's processes from them (all pure).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkbase.facts.parsers.docker import (
    Container,
    Image,
    cgroup_container_id,
    parse_container_inspect,
    parse_image_inspect,
    split_answer,
    with_images,
)
from sparkbase.facts.parsers.nccl import NcclConf, parse_nccl_conf
from sparkbase.facts.parsers.runtime import (
    MappedFile,
    ProbeRecords,
    ProcCgroup,
    RuntimeRecords,
    ToolAnswer,
    parse_cgroup,
    parse_cmdline_args,
    parse_environ,
    parse_maps_files,
    parse_runtime_section,
    parse_status_cpus,
    parse_status_ppid,
)
from sparkbase.facts.script import FactPlan, Read, Reader

#: the fact script section that holds every runtime record
RUNTIME_SECTION = "runtime"
#: NCCL's system-wide configuration file, read after the user's (src/misc/param.cc)
SYSTEM_NCCL_CONF = "/etc/nccl.conf"
#: the longest parent chain walked (ancestors of the probe, descendants of a lane)
MAX_DEPTH = 1024
#: the most containers (found from the processes' cgroups) asked about, and the most
#: images; a node running more lanes than that in containers is beyond a lane probe
MAX_CONTAINERS = 16
#: the most bytes of each docker answer kept (a container's inspect is ~10 KB)
MAX_TOOL_BYTES = 512 * 1024
#: the docker answers of the runtime section (`@tool docker KIND`)
DOCKER_CONTAINERS = ("docker", "containers")
DOCKER_IMAGES = ("docker", "images")
#: exit status of a command the shell did not find (POSIX)
NOT_FOUND = 127
#: seconds each docker command of the probe may take: a hung dockerd costs the node its
#: container facts, never its whole fact read (the read's own deadline is 60 s)
DOCKER_TIMEOUT = 15
#: `timeout`'s exit status when the command ran out of time (and SIGKILL's, after the grace)
TIMED_OUT = (124, 137)


def _q(word: str) -> str:
    return shlex.quote(word)


DUMP = "od -An -v -tx1"


def _record(name: str, path: str) -> str:
    """Shell text: one `@file PID NAME` record of `path` (hex), ending `@rc STATUS`."""
    return f'echo "@file $p {name}"; {DUMP} "{path}" 2>/dev/null; echo "@rc $?"; '


#: the environment variables the probe needs on the node, and the shell variable each goes to
ENVIRON_VALUES = (("NCCL_CONF_FILE", "c"), ("HOME", "h"))


def _environ_values() -> str:
    """Shell text: each variable of `ENVIRON_VALUES` set to the first value of its name in
    the process's environment (empty when it has none): one `tr | grep` reads them all,
    the shell's builtins split them (no process per variable)."""
    names = " ".join(f"-e '^{name}='" for name, _ in ENVIRON_VALUES)
    resets = "".join(f"{var}=; {var}_=; " for _, var in ENVIRON_VALUES)
    cases = "".join(f'{name}=*) [ -n "${var}_" ] || {{ {var}_=1; {var}=${{l#*=}}; }};; '
                    for name, var in ENVIRON_VALUES)
    return (
        f"e=$(tr '\\0' '\\n' <\"/proc/$p/environ\" | grep {names}); {resets}"
        # split on newlines only, no globbing: each line is one NAME=value
        "set -f; IFS='\n'; for l in $e; do case $l in " + cases + "esac; done; unset IFS; set +f; "
    )


#: awk over `M /proc/N/cmdline` lines (the matches) and `grep -H` lines of every process's
#: status (`PPid:`) and cgroup: prints the PIDs to read, one a line. Mirrors `lane_group`
#: (same cgroup or below in every hierarchy, `ProcCgroup.holds`; a root cgroup is nobody's
#: unit), over the union of the lanes, less the probe's own shells (`self`, its ancestors,
#: its descendants). A line a process forges inside its own cgroup path is still filed
#: under that process (grep -H names the real file), so it can only move itself.
SELECT_AWK = r"""
function path(l, i) { i = index(l, ":"); l = substr(l, i + 1); i = index(l, ":"); return substr(l, i + 1) }
function head(l) { return substr(l, 1, length(l) - length(path(l))) }
function unit(p, k, u) {
  u = ""
  for (k = 1; k <= n[p]; k++) {
    if (h[p, k] ~ /^0::/) return path(h[p, k])
    if (h[p, k] ~ /^[0-9]+:name=systemd:/) u = path(h[p, k])
  }
  return u
}
function under(x, y) { return y == "/" || x == y || index(x, y "/") == 1 }
function holds(m, p, k) {
  if (n[m] != n[p]) return 0
  for (k = 1; k <= n[m]; k++)
    if (head(h[m, k]) != head(h[p, k]) || !under(path(h[p, k]), path(h[m, k]))) return 0
  return 1
}
/^M \/proc\/[0-9]+\/cmdline$/ { split($2, a, "/"); m[a[3]] = 1; next }
{
  i = index($0, ":"); f = substr($0, 1, i - 1); v = substr($0, i + 1)
  if (f !~ /^\/proc\/[0-9]+\/(status|cgroup)$/) next
  split(f, a, "/"); p = a[3]
  if (a[4] == "status") {
    if (!(p in pp) && v ~ /^PPid:[ \t]*[0-9]+$/) { sub(/^PPid:[ \t]*/, "", v); pp[p] = (v + 0) "" }
  } else if (v ~ /^[0-9]+:[^:]*:\//) { n[p]++; h[p, n[p]] = v }
}
END {
  q = self ""; d = 0
  while ((q in pp) && !(q in me) && d++ < MAXD) { me[q] = 1; q = pp[q] }
  for (p in pp) {
    x = p; d = 0
    while ((x in pp) && d++ < MAXD) { if (x == self "") { me[p] = 1; break }; x = pp[x] }
  }
  for (p in m) if ((p in pp) && !(p in me)) { g[p] = 1; u = unit(p); if (u != "" && u != "/") home[p] = 1 }
  for (p in pp) if (!(p in me)) for (q in home) if (holds(q, p)) { g[p] = 1; break }
  for (p in pp) if (!(p in me)) {
    x = p; d = 0
    while ((x in pp) && d++ < MAXD) { if (x in g) { print p; break }; x = pp[x] }
  }
}
"""


def select_command(first_matches: Sequence[str]) -> str:
    """Shell text printing the PIDs the probe reads (see `SELECT_AWK`): every file name is
    expanded once, by one grep, so a process is seen with both its PPid and its cgroup or
    not at all; the greps' own processes are the probe's descendants."""
    patterns = " ".join(f"-e {_q(m)}" for m in sorted(set(first_matches)))
    return (
        f"s=$(grep -lsF {patterns} /proc/[0-9]*/cmdline); "
        "t=$(grep -sH -e '^PPid:' -e '^[0-9][0-9]*:' /proc/[0-9]*/status /proc/[0-9]*/cgroup); "
        f"{{ printf 'M %s\\n' $s; printf '%s\\n' \"$t\"; }} | "
        f"awk -v self=$$ -v MAXD={MAX_DEPTH} {_q(SELECT_AWK)}"
    )


def _tool(tool: str, kind: str, command: str) -> str:
    """Shell text: run `command` (its stdout and stderr together) into `$o`, then print it
    as one `@tool TOOL KIND` record (hex, capped at `MAX_TOOL_BYTES`) ending `@rc STATUS`."""
    return (f"o=$({command} 2>&1); r=$?; echo \"@tool {tool} {kind}\"; "
            f"printf '%s\\n' \"$o\" | head -c {MAX_TOOL_BYTES} | {DUMP}; echo \"@rc $r\"; ")


#: what names a Docker container in a cgroup path (`facts.parsers.docker.container_id`)
CONTAINER_ID_PATTERN = "docker-[0-9a-f]{64}[.]scope|/docker/[0-9a-f]{64}"
#: the container ids the selected processes' cgroups name (Docker's systemd driver:
#: docker-<id>.scope; cgroupfs: /docker/<id>), one grep over all their cgroup files
CONTAINER_IDS = (
    f"I=$([ -z \"$P\" ] || grep -ohsE {_q(CONTAINER_ID_PATTERN)} "
    "$(for p in $P; do printf '/proc/%s/cgroup ' \"$p\"; done) /dev/null "
    f"| grep -oE '[0-9a-f]{{64}}' | sort -u | head -n {MAX_CONTAINERS}); "
)


def docker_command(containers: Sequence[str]) -> str:
    """Shell text: Docker's view of the containers the selected processes (`$P`) run in and
    of the named `containers` (`docker inspect`), then of their images (`docker image
    inspect`, the images' ids read from the first answer's `"Image": "sha256:…"` lines).
    Nothing runs when there is nothing to ask."""
    names = " ".join(_q(name) for name in sorted(set(containers)))
    images = (f"G=$(printf '%s\\n' \"$o\" | grep -oE '\"Image\": *\"sha256:[0-9a-f]{{64}}\"' "
              f"| grep -oE 'sha256:[0-9a-f]{{64}}' | sort -u | head -n {MAX_CONTAINERS}); ")
    return "".join([
        CONTAINER_IDS,
        f"N={_q(names)}; " if names else "N=; ",
        'if [ -n "$I$N" ]; then ',
        _tool(*DOCKER_CONTAINERS, f"timeout -k 5 {DOCKER_TIMEOUT} docker inspect $I $N"),
        images,
        'if [ -n "$G" ]; then ',
        _tool(*DOCKER_IMAGES, f"timeout -k 5 {DOCKER_TIMEOUT} docker image inspect $G"),
        "fi; ",
        "fi; ",
    ])


def probe_command(first_matches: Sequence[str], containers: Sequence[str] = (), detail: bool = True) -> str:
    """The runtime section's shell command for the lanes whose first match strings are
    `first_matches` and whose containers are named `containers`: their processes, cgroups
    and workers (`select_command`), then Docker's view of their containers
    (`docker_command`).

    Every error is silenced (a process may end mid-read; its records then say so), so the
    section holds records only. The NCCL lines of a process's maps are read once (`m`),
    for their record and the hashes; a library file several processes map is hashed once.
    Without `detail` (the drain's question: which processes are still there) only each
    process's cmdline, status and cgroup are read.
    """
    files = ("cmdline", "environ", "status", "cgroup") if detail else ("cmdline", "status", "cgroup")
    nccl = [
        'm=$(grep -F libnccl "/proc/$p/maps"); ',
        f'echo "@file $p maps"; [ -z "$m" ] || printf \'%s\\n\' "$m" | {DUMP}; echo "@rc 0"; ',
        _environ_values(),
        # NCCL fopen()s $NCCL_CONF_FILE as given: a relative name from the process's cwd
        'case $c in "") ;; /*) c=/proc/$p/root$c;; *) c=/proc/$p/cwd/$c;; esac; ',
        'if [ -n "$c" ]; then ', _record("user-conf", "$c"),
        'elif [ -n "$h" ]; then ', _record("user-conf", "/proc/$p/root$h/.nccl.conf"), "fi; ",
        _record("system-conf", f"/proc/$p/root{SYSTEM_NCCL_CONF}"),
        # each mapped library once per file (device:inode): a server and its workers map
        # the same libnccl, hashed once (`H` holds `dev:ino=sha256` of those done)
        "set -f; IFS='\n'; ",
        "for l in $([ -z \"$m\" ] || printf '%s\\n' \"$m\" | awk '{print $6}' | sort -u); ",
        "do unset IFS; set +f; ",
        f'echo "@hash $p $(printf %s "$l" | {DUMP} | tr -d " \\n")"; ',
        'i=$(stat -L -c %d:%i "/proc/$p/root$l"); d=; ',
        'case " $H " in *" $i="*) d=${H##*" $i="}; d=${d%% *};; esac; ',
        '[ -n "$d" ] || { d=$(sha256sum <"/proc/$p/root$l" | cut -d" " -f1); ',
        '[ -z "$i" ] || H="$H $i=$d"; }; ',
        'echo "$d"; echo "@rc 0"; done; unset IFS; set +f; ',
    ] if detail else []
    return "".join(
        [
            f"{{ H=; P=$({select_command(first_matches)}); " if first_matches else "{ H=; P=; ",
            "for p in $P; do ",
            *(_record(name, f"/proc/$p/{name}") for name in files),
            *nccl,
            "done; ",
            docker_command(containers),
            "} 2>/dev/null; true",
        ]
    )


@dataclass(frozen=True)
class ConfFile:
    """One nccl.conf a process's NCCL reads, as NCCL reads it, and what names it."""

    label: str
    conf: NcclConf


@dataclass(frozen=True)
class ServingProcess:
    """One process of a lane on the node: a process whose command line matched a lane's
    first string, or one in the same cgroup, or a descendant of either (its workers)."""

    pid: int
    args: tuple[str, ...]
    environ: dict[str, str] | None
    cpus: frozenset[int] | None
    cgroup: ProcCgroup | None
    libraries: tuple[MappedFile, ...]
    #: sha256 of each mapped library path, read through /proc/PID/root (None: unreadable)
    library_sha256: dict[str, str | None]
    #: the user's nccl.conf ($NCCL_CONF_FILE, else ~/.nccl.conf) and /etc/nccl.conf as the
    #: process's mount namespace shows them (None: no such file there)
    user_conf: str | None
    system_conf: str | None
    errors: dict[str, str] = field(default_factory=dict)
    #: the parent's PID (`PPid` of /proc/PID/status; None: unreadable)
    ppid: int | None = None

    @property
    def container_id(self) -> str | None:
        """The Docker container the process runs in, from its cgroup (None: none, or unread)."""
        return cgroup_container_id(self.cgroup) if self.cgroup is not None else None

    @property
    def command_line(self) -> str:
        """The arguments joined by spaces (what `match` strings are looked for in)."""
        return " ".join(self.args)

    def matches(self, strings: Sequence[str]) -> bool:
        """Whether every string occurs in the command line."""
        line = self.command_line
        return bool(self.args) and all(s in line for s in strings)

    @property
    def maps_nccl(self) -> bool:
        """Whether the process has loaded a libnccl (maps one)."""
        return bool(self.libraries)

    def conf_files(self) -> tuple[ConfFile, ...]:
        """The nccl.conf files NCCL reads in this process, in the order it reads them: the
        user's ($NCCL_CONF_FILE when set and not empty, else ~/.nccl.conf), then
        /etc/nccl.conf (NVIDIA/nccl src/misc/param.cc `initEnvFunc`)."""
        files: list[ConfFile] = []
        if self.user_conf is not None:
            named = bool(self.environ and self.environ.get("NCCL_CONF_FILE"))
            label = "$NCCL_CONF_FILE" if named else "~/.nccl.conf"
            files.append(ConfFile(label, parse_nccl_conf(self.user_conf)))
        if self.system_conf is not None:
            files.append(ConfFile(f"{SYSTEM_NCCL_CONF} in the process's mount namespace",
                                  parse_nccl_conf(self.system_conf)))
        return tuple(files)

    def nccl_setting(self, key: str, default: str | None = None) -> tuple[str | None, str]:
        """The value NCCL would use for `key` in this process, and where it comes from.

        NCCL applies its config files with setenv(..., overwrite=0): the environment wins,
        then the user's file ($NCCL_CONF_FILE, else ~/.nccl.conf), then /etc/nccl.conf,
        then NCCL's built-in default; inside a file the first line for a key wins
        (`parse_nccl_conf`). The environment is /proc/PID/environ, the one the process
        was started with: a value the process sets in itself later is not visible from
        outside. NCCL finds the home directory from $HOME (since v2.30; getpwuid() before);
        the probe uses the process's $HOME.
        """
        if self.environ is not None and key in self.environ:
            return self.environ[key], "environment"
        for conf in self.conf_files():
            value = conf.conf.value(key)
            if value is not None:
                return value, conf.label
        return default, "NCCL's default" if default is not None else "unset"


@dataclass(frozen=True)
class LaneGroup:
    """One lane's processes on a node: those whose command line holds every match string,
    and every process of their cgroups (the unit's or container's) and descendants."""

    matched: tuple[ServingProcess, ...]
    members: tuple[ServingProcess, ...]
    #: the cgroups (`ProcCgroup.unit_path`) of the matched processes: the lane's identity
    cgroups: tuple[str, ...] = ()

    @property
    def serving(self) -> bool:
        """Whether any process of the lane runs on the node."""
        return bool(self.matched)

    @property
    def nccl_users(self) -> tuple[ServingProcess, ...]:
        """The members that map a libnccl: what NCCL settings and library are judged on."""
        return tuple(p for p in self.members if p.maps_nccl)


def _descends(process: ServingProcess, by_pid: dict[int, ServingProcess], roots: set[int]) -> bool:
    """Whether `process` or one of its ancestors (within `by_pid`) is in `roots`."""
    pid: int | None = process.pid
    for _ in range(MAX_DEPTH):
        if pid is None or pid not in by_pid:
            return False
        if pid in roots:
            return True
        pid = by_pid[pid].ppid
    return False


def lane_group(processes: Iterable[ServingProcess], match: Sequence[str]) -> LaneGroup:
    """The processes of the lane found by `match` among a node's `processes` (pure).

    Matched: every string of `match` in the command line. Members: the matched, every
    process in a matched one's cgroup or below it (`ProcCgroup.holds`; a matched process
    in the root cgroup brings no others), and every descendant of those (a worker moved to
    another cgroup is still the server's child). PID order.
    """
    every = sorted(processes, key=lambda p: p.pid)
    matched = [p for p in every if p.matches(match)]
    homes = [p.cgroup for p in matched if p.cgroup is not None and p.cgroup.unit_path is not None]
    roots = {p.pid for p in matched}
    roots |= {p.pid for p in every if p.cgroup is not None and any(home.holds(p.cgroup) for home in homes)}
    by_pid = {p.pid: p for p in every}
    members = tuple(p for p in every if _descends(p, by_pid, roots))
    paths = tuple(sorted({home.unit_path for home in homes if home.unit_path is not None}))
    return LaneGroup(tuple(matched), members, paths)


def _parse_or_error(errors: dict[str, str], name: str, text: str | None, parser):  # type: ignore[no-untyped-def]
    if text is None:
        errors[name] = f"/proc/PID/{name} unreadable"
        return None
    try:
        return parser(text)
    except ValueError as exc:
        errors[name] = f"unreadable /proc/PID/{name}: {exc}"
        return None


def _ppid(text: str | None) -> int | None:
    try:
        return parse_status_ppid(text) if text is not None else None
    except ValueError:
        return None


def _processes(records: dict[int, ProbeRecords]) -> list[ServingProcess]:
    out: list[ServingProcess] = []
    for pid, record in sorted(records.items()):
        files = record.files
        if files.get("cmdline") is None:
            continue  # ended between the search and the read
        errors: dict[str, str] = {}
        maps = (_parse_or_error(errors, "maps", files.get("maps"), parse_maps_files)
                if "maps" in files else None)
        out.append(
            ServingProcess(
                pid=pid,
                args=parse_cmdline_args(files["cmdline"] or ""),
                environ=_parse_or_error(errors, "environ", files.get("environ"), parse_environ)
                if "environ" in files else None,
                cpus=_parse_or_error(errors, "status", files.get("status"), parse_status_cpus),
                cgroup=_parse_or_error(errors, "cgroup", files.get("cgroup"), parse_cgroup),
                libraries=maps or (),
                library_sha256=dict(record.hashes),
                user_conf=files.get("user-conf"),
                system_conf=files.get("system-conf"),
                errors=errors,
                ppid=_ppid(files.get("status")),
            )
        )
    return out


@dataclass(frozen=True)
class RuntimeFacts:
    """The runtime section read: the processes, and Docker's view of their containers."""

    processes: tuple[ServingProcess, ...]
    #: container id -> the container (with its image's RepoDigests when docker told them)
    containers: dict[str, Container]
    #: a container asked about (by id or by name) -> why docker could not show it
    #: ("docker not found", "no such container", ...)
    container_errors: dict[str, str]


def asked_containers(processes: Iterable[ServingProcess], names: Iterable[str] = ()) -> list[str]:
    """What the probe asks docker about: the container ids of the processes (sorted, at most
    `MAX_CONTAINERS`, as the node's `sort -u | head` keeps them), then the `names`."""
    ids = sorted({p.container_id for p in processes if p.container_id is not None})[:MAX_CONTAINERS]
    return [*ids, *sorted(set(names))]


def _why(answer: ToolAnswer, notes: tuple[str, ...], command: str) -> str:
    """Why a docker command gave no answer: not installed, or its exit status and last words."""
    if answer.status == NOT_FOUND:
        return "docker not found"
    if answer.status in TIMED_OUT:
        return f"{command}: docker did not answer within {DOCKER_TIMEOUT} s (is dockerd hung?)"
    if answer.status == 0:
        return f"{command} printed no whole JSON array (cut short at {MAX_TOOL_BYTES} bytes, or not JSON)"
    said = f": {notes[-1][:200]}" if notes else ""
    return f"{command} exit {answer.status}{said}"


def _missing(key: str, notes: tuple[str, ...]) -> str:
    """Why docker's answer holds no `key` (it says so, `No such object: KEY`, or it does not)."""
    said = next((note for note in notes if key in note), None)
    return "no such container" if said is not None and "No such" in said else "not in docker's answer"


def _images(answer: ToolAnswer | None) -> tuple[list[Image], str | None]:
    """The images of the second docker answer (none asked: none), and why it could not be
    read (None: it could)."""
    if answer is None:
        return [], None
    text, notes = split_answer(answer.text)
    if text is None:
        return [], _why(answer, notes, "docker image inspect")
    try:
        return parse_image_inspect(text), None
    except ValueError as exc:
        return [], f"docker image inspect answer unreadable: {exc}"


def _containers(tools: dict[tuple[str, str], ToolAnswer],
                asked: list[str]) -> tuple[dict[str, Container], dict[str, str]]:
    """Docker's answers → the containers by id, and why each asked one (or its image, by
    image id) is missing."""
    answer = tools.get(DOCKER_CONTAINERS)
    if answer is None:
        return {}, {key: "docker was not asked (the runtime section ended before it)" for key in asked}
    text, notes = split_answer(answer.text)
    if text is None:
        return {}, {key: _why(answer, notes, "docker inspect") for key in asked}
    try:
        found = parse_container_inspect(text)
    except ValueError as exc:
        return {}, {key: f"docker inspect answer unreadable: {exc}" for key in asked}
    images, image_problem = _images(tools.get(DOCKER_IMAGES))
    found = with_images(found, images)
    shown = {image.id for image in images}
    names = {c.name for c in found}
    ids = {c.id for c in found}
    errors = {key: _missing(key, notes) for key in asked if key not in names and key not in ids}
    for container in found:
        if container.image_id not in shown:
            errors[container.image_id] = image_problem or "docker image inspect did not show it (removed?)"
    return {c.id: c for c in found}, errors


def read_runtime(section_text: str, names: Sequence[str] = ()) -> RuntimeFacts:
    """The runtime section of a probe asked about the containers `names` → its processes
    and Docker's view of the containers (pure)."""
    records: RuntimeRecords = parse_runtime_section(section_text)
    processes = _processes(records.processes)
    asked = asked_containers(processes, names)
    containers, errors = _containers(records.tools, asked) if asked else ({}, {})
    return RuntimeFacts(tuple(processes), containers, errors)


def sections(plan: FactPlan) -> list[Read]:
    """The lanes' serving processes and containers, when the plan names any."""
    if not (plan.serving_matches or plan.serving_containers):
        return []
    return [(RUNTIME_SECTION, probe_command(plan.serving_matches, plan.serving_containers))]


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The serving processes' and containers' `NodeFacts` fields (none asked: none)."""
    found = RuntimeFacts((), {}, {})
    if (plan.serving_matches or plan.serving_containers) and not plan.core_only:
        found = r.parse(RUNTIME_SECTION, lambda text: read_runtime(text, plan.serving_containers)) or found
    return {"serving": found.processes, "containers": found.containers,
            "container_errors": found.container_errors}
