"""The one-round-trip fact script: what to ask a node, as one POSIX sh script, and its answer.

A `FactPlan` holds the exact paths, sysctls, units, HCAs and packages to read
(`facts.areas.plan_for` makes one from a baseline). Each area (`facts/areas.py`) turns a
plan into sections, each a command of separately quoted words; `fenced_script` wraps them so
the output reads `<marker> BEGIN name`, the command's output (stderr merged), `<marker> END
name rc`. `split_sections` is the pure inverse; `Reader` applies parsers to the sections.

The marker carries a random nonce, and no process on the node can learn it: the script's
text (on the remote `sh -c` command line, which every process can read in
`/proc/PID/cmdline`) holds no marker; the script reads it from its stdin first
(`MARKER_FROM_STDIN`), sent down the SSH channel, into a shell variable that is never
exported. So neither a file's content nor a tool's output can forge a section boundary,
and an answer with a section twice or a section the script never prints is refused
(`SectionError`) rather than read.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
#: one section of the script: its name and its command line
Read = tuple[str, str]
#: one section of plain files the `files` section reads: its name and its paths (globs allowed)
FileRead = tuple[str, tuple[str, ...]]

#: the one section that reads every plain file
FILES_SECTION = "files"


@dataclass(frozen=True)
class FactPlan:
    """Exactly what to read on one node, derived from the baseline it should carry."""

    sysctls: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    slice_unit: str | None = None
    hashed_paths: tuple[str, ...] = ()
    nccl_library_path: str | None = None
    nccl_conf_path: str = "/etc/nccl.conf"
    stamp_path: str = "/etc/sparkbase/stamp.json"
    hcas: tuple[str, ...] = ()
    gid_index: int = 3
    module_params: tuple[tuple[str, str], ...] = ()  # (module, parameter)
    memory_saver_module: str | None = None
    fan_module: str | None = None  # the fan-control DKMS module (`modinfo`)
    swap_paths: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    mok_keys: bool = True  # list enrolled MOK keys (a pinned key, or a module to sign)
    core_only: bool = False  # only kernel release, machine and page size (triggers' evidence)
    #: first match strings of the lanes whose serving processes to read (facts/runtime.py)
    serving_matches: tuple[str, ...] = ()
    #: names of the containers the lanes run as (asked of docker with the processes' own)
    serving_containers: tuple[str, ...] = ()
    #: a short GPU load the GPU reading is taken under (argv; empty: read the GPU as it is).
    #: At launch nothing serves yet and an idle GB10 is never judged latched; a lane may name
    #: a probe so the launch gate sees the clock under load (policy/gpu_clock.py)
    gpu_probe: tuple[str, ...] = ()
    #: seconds the probe runs before nvidia-smi reads (it is stopped right after)
    gpu_probe_seconds: float = 2.0
    #: read NVMe feature 0x08 (interrupt coalescing) of the node's first controller
    nvme_coalescing: bool = False
    #: read every filled GID entry of every RDMA port, with its type and netdev (adopt finds
    #: the fabric from it: `GID_TABLE_COMMAND`)
    gid_tables: bool = False
    #: list every netplan file with its exact text (`NETPLAN_FILES_COMMAND`): the fabric is
    #: managed in a site's own netplan file (`fabric.netplan_file`), or `adopt` asks
    netplan_files: bool = False
    #: read the UEFI boot order (`efibootmgr`)
    efi_boot: bool = False
    #: read the driver of every DRM card (`DRM_DRIVERS_COMMAND`)
    drm_drivers: bool = False
    #: read the active virtual console's mode (`CONSOLE_COMMAND`)
    console_mode: bool = False
    #: read the systemd manager's watchdog properties
    watchdog: bool = False
    # --- what plan and apply read besides (`deploy/reads.py` fills these from the steps) ---
    #: paths whose state is read: what is there, never following a link (`state.file_state_command`)
    file_states: tuple[str, ...] = ()
    #: paths whose text is read, regular files only (`state.file_text_command`)
    file_texts: tuple[str, ...] = ()
    #: (path, than): whether `path` was modified after `than`
    newer: tuple[tuple[str, str], ...] = ()
    #: units whose `NeedDaemonReload` is read
    need_reload: tuple[str, ...] = ()
    #: (kernel, module): `modinfo -k KERNEL MODULE` of a module built for a target kernel
    kernel_modinfo: tuple[tuple[str, str], ...] = ()
    #: (name, version): the DKMS source tree /usr/src/NAME-VERSION and its stamp
    dkms_sources: tuple[tuple[str, str], ...] = ()
    #: read `dkms status` (every module) even when no DKMS module is judged
    dkms_status: bool = False
    #: read the packages marked hold (`apt-mark showhold`)
    held: bool = False
    #: read the active swap areas even when no swap file is judged
    swapon: bool = False
    #: swap files whose size, mode, kind, header page size and header UUID are read
    swap_files: tuple[str, ...] = ()
    #: (release, path): the sha256 of `path` as `release`'s initramfs packs it
    initramfs: tuple[tuple[str, str], ...] = ()
    #: directories whose entries (and each file's sha256) are read
    dir_entries: tuple[str, ...] = ()
    #: read the node's ownership record
    ownership: bool = False
    #: the file an apply notes the reboot it staged in (read when set)
    staged_path: str | None = None


def fixed(*reads: T) -> Callable[[FactPlan], Sequence[T]]:
    """An area's reads that are the same whatever the plan, as a registry entry."""
    return lambda _plan: reads


def cmd(*argv: str) -> str:
    """One command line from separately quoted words."""
    return " ".join(shlex.quote(arg) for arg in argv)


def new_marker() -> str:
    """A section marker no file on the node can contain by accident or on purpose."""
    return f"@@sparkbase-facts-{secrets.token_hex(8)}@@"


def marker_stdin(marker: str) -> str:
    """What a fenced script is sent on its stdin: the marker, one line."""
    return marker + "\n"


def read_marker(variable: str) -> str:
    """The shell line that reads the marker from stdin into `variable` (never exported),
    and stops the script when none came (an empty marker would fence nothing)."""
    return f'IFS= read -r {variable} && [ -n "${variable}" ] || exit 125'


class SectionError(ValueError):
    """An answer whose sections cannot be trusted: a section printed twice, or a section
    the script never prints (`section` names it)."""

    def __init__(self, section: str, problem: str) -> None:
        super().__init__(f"section {section!r} {problem}: the answer is refused")
        self.section = section
        self.problem = problem


#: sections whose parser needs clean stdout: the command's stderr goes to the script's own
#: stderr, fenced there by the same marker (`Section.stderr`), so warnings (`Deprecated
#: feature: …`, `Error! …`) never mix into what the parser reads
STDERR_APART = frozenset({"dkms", "modinfo", "sb-state", "mok-enrolled", "mok-new", "dpkg"})
#: the shell functions every fenced command needs (`b`/`e` print the fences)
FENCE_PRELUDE = (
    "export LC_ALL=C",
    'b() { printf \'%s BEGIN %s\\n\' "$M" "$1"; }',
    'e() { printf \'\\n%s END %s %s\\n\' "$M" "$1" "$2"; }',
)


def fence(name: str, command: str, *, stderr_apart: bool = False) -> str:
    """One section's shell line: fences around `command`, stdin closed.

    stderr is merged into the section, or with `stderr_apart` left on the script's stderr
    between fences of its own (builtins only: no process is added).
    """
    quoted = shlex.quote(name)
    if not stderr_apart:
        return f"b {quoted}; {{ {command}; }} </dev/null 2>&1; e {quoted} $?"
    return f"b {quoted}; b {quoted} >&2; {{ {command}; }} </dev/null; r=$?; e {quoted} $r >&2; e {quoted} $r"


#: the first line of every fenced script: the marker, from stdin (`marker_stdin`)
MARKER_FROM_STDIN = read_marker("M")


def fenced_script(named: Sequence[tuple[str, str]], apart: frozenset[str] = STDERR_APART) -> str:
    """A POSIX sh script printing each (name, command) fenced by the marker it reads from
    its stdin (send `marker_stdin(marker)`; the pure inverse is `split_sections`); used by
    the audit's script and by the deploy's pyinfra facts."""
    lines = [MARKER_FROM_STDIN, *FENCE_PRELUDE]
    lines += [fence(name, command, stderr_apart=name in apart) for name, command in named]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Section:
    """One section of the answer: the command's output and exit status (and its stderr,
    for the sections that keep it apart)."""

    output: str
    status: int
    stderr: str = ""


@dataclass
class Sections:
    """The parsed answer: sections by name."""

    by_name: dict[str, Section] = field(default_factory=dict)

    def get(self, name: str) -> Section | None:
        """The section called `name`, if the node answered it."""
        return self.by_name.get(name)


def _fenced(text: str, marker: str) -> Iterator[re.Match[str]]:
    pattern = re.compile(
        rf"^{re.escape(marker)} BEGIN (?P<name>[^\n]+)\n(?P<body>.*?)\n"
        rf"{re.escape(marker)} END (?P=name) (?P<rc>\d+)$",
        re.DOTALL | re.MULTILINE,
    )
    return pattern.finditer(text)


def _bodies(text: str, marker: str, expected: Collection[str] | None) -> dict[str, tuple[str, int]]:
    """Each fenced section's (body, exit status) by name; `SectionError` for a name seen
    twice or not in `expected` (when given)."""
    found: dict[str, tuple[str, int]] = {}
    for match in _fenced(text, marker):
        name = match["name"]
        if name in found:
            raise SectionError(name, "appears twice")
        if expected is not None and name not in expected:
            raise SectionError(name, "is not one the script prints")
        found[name] = (match["body"], int(match["rc"]))
    return found


def split_sections(text: str, marker: str, stderr: str = "",
                   expected: Collection[str] | None = None) -> Sections:
    """Split the script's output into sections (pure; the inverse of `build_script`);
    `stderr` is the script's stderr, whose fenced parts are the sections' own stderr.

    A section printed twice, or (with `expected`, the names the script prints) one it
    never prints, raises `SectionError`: something on the node printed fences.
    """
    errors = _bodies(stderr, marker, expected)
    return Sections({name: Section(body, status, errors.get(name, ("", 0))[0])
                     for name, (body, status) in _bodies(text, marker, expected).items()})


def unfinished_section(text: str, marker: str) -> str | None:
    """The last section of a cut answer whose BEGIN fence came without its END (where a
    command printed without end, or hung), or None."""
    begun = re.findall(rf"^{re.escape(marker)} BEGIN ([^\n]+)$", text, re.MULTILINE)
    ended = set(re.findall(rf"^{re.escape(marker)} END ([^\n]+) \d+$", text, re.MULTILINE))
    left = [name for name in begun if name not in ended]
    return left[-1] if left else None


class Reader:
    """Applies parsers to sections, collecting what failed; `facts`: the fields read so far."""

    def __init__(self, sections: Sections) -> None:
        self.sections = sections
        self.errors: dict[str, str] = {}
        self.facts: dict[str, Any] = {}

    def text(self, name: str, *, quiet: bool = False) -> str | None:
        """The output of a section that exited 0, else None (and an error unless quiet)."""
        section = self.sections.get(name)
        if section is None:
            self.errors[name] = "no answer (the script stopped before this section)"
            return None
        if section.status != 0:
            if not quiet:
                detail = " ".join((section.output + section.stderr).split())[:200] or "no output"
                self.errors[name] = f"exit {section.status}: {detail}"
            return None
        return section.output

    def parse(self, name: str, parser: Callable[[str], T], *, quiet: bool = False) -> T | None:
        """`parser(output)`, or None with the reason recorded."""
        text = self.text(name, quiet=quiet)
        if text is None:
            return None
        try:
            return parser(text)
        except (ValueError, KeyError, TypeError) as exc:
            self.errors[name] = f"unreadable output: {exc}"
            return None
