"""Serving processes on a node, read from the host's /proc in the fact script's round trip.

`probe_command` is one section of the fact script: it finds the processes whose command
line holds a lane's first match string (`grep -lF` over /proc/[0-9]*/cmdline) and, per
process, hex-dumps its cmdline, environ, status, cgroup, the NCCL lines of its maps, the
nccl.conf files NCCL would read inside the process's own mount namespace
(`/proc/PID/root/...`), and the sha256 of every libnccl it maps, read through that root.
`serving_processes` turns the section into typed values (pure).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkbase.facts.parsers.nccl_conf import parse_kv_conf
from sparkbase.facts.parsers.runtime import (
    MappedFile,
    ProcCgroup,
    parse_cgroup,
    parse_cmdline_args,
    parse_environ,
    parse_maps_files,
    parse_probe,
    parse_status_cpus,
)

#: the fact script section that holds every runtime record
RUNTIME_SECTION = "runtime"
#: text only the probe's own shell line holds: a process whose command line has it is the
#: fact script (or `sudo` running it), never a serving process
PROBE_SELF = "/proc/[0-9]*/cmdline"
#: NCCL's system-wide configuration file, read after the user's (src/misc/param.cc)
SYSTEM_NCCL_CONF = "/etc/nccl.conf"


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


def probe_command(first_matches: Sequence[str]) -> str:
    """The runtime section's shell command for processes holding any of `first_matches`.

    Every error is silenced (a process may end mid-read; its records then say so), so the
    section holds records only. A process whose command line holds `PROBE_SELF` (the probe's
    own shells, and any login shell or sudo that started them) never matches, and one that
    has ended (the grep that found the others) has nothing to read: neither is read. The
    NCCL lines of a process's maps are read once (`m`), for their record and the hashes.
    """
    patterns = " ".join(f"-e {_q(m)}" for m in sorted(set(first_matches)))
    return "".join(
        [
            # left out before any is read: a command line holding PROBE_SELF (the probe's
            # own shells: never a match, `ServingProcess.matches`) and a process gone by now
            # (the grep that listed them: `serving_processes` skips what has no cmdline)
            f"{{ s=$(grep -lsF {patterns} {PROBE_SELF}); ",
            f'for f in $([ -z "$s" ] || grep -LsF {_q(PROBE_SELF)} $s); do ',
            'p=${f#/proc/}; p=${p%/cmdline}; [ "$p" = "$$" ] && continue; ',
            *(_record(name, f"/proc/$p/{name}") for name in ("cmdline", "environ", "status", "cgroup")),
            'm=$(grep -F libnccl "/proc/$p/maps"); ',
            f'echo "@file $p maps"; [ -z "$m" ] || printf \'%s\\n\' "$m" | {DUMP}; echo "@rc 0"; ',
            _environ_values(),
            'if [ -n "$c" ]; then ', _record("user-conf", "/proc/$p/root$c"),
            'elif [ -n "$h" ]; then ', _record("user-conf", "/proc/$p/root$h/.nccl.conf"), "fi; ",
            _record("system-conf", f"/proc/$p/root{SYSTEM_NCCL_CONF}"),
            "[ -z \"$m\" ] || printf '%s\\n' \"$m\" | awk '{print $6}' | sort -u | while read -r l; do ",
            f'echo "@hash $p $(printf %s "$l" | {DUMP} | tr -d " \\n")"; ',
            'sha256sum <"/proc/$p/root$l" | cut -d" " -f1; echo "@rc $?"; done; ',
            "done; } 2>/dev/null; true",
        ]
    )


@dataclass(frozen=True)
class ServingProcess:
    """One process the node runs whose command line matched a lane's first string."""

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

    @property
    def command_line(self) -> str:
        """The arguments joined by spaces (what `match` strings are looked for in)."""
        return " ".join(self.args)

    def matches(self, strings: Sequence[str]) -> bool:
        """Whether every string occurs in the command line."""
        line = self.command_line
        return bool(self.args) and PROBE_SELF not in line and all(s in line for s in strings)

    def nccl_setting(self, key: str, default: str | None = None) -> tuple[str | None, str]:
        """The value NCCL would use for `key` in this process, and where it comes from.

        NCCL applies its config files with setenv(..., overwrite=0): the environment wins,
        then the user's file ($NCCL_CONF_FILE, else ~/.nccl.conf), then /etc/nccl.conf,
        then NCCL's built-in default (NVIDIA/nccl src/misc/param.cc `initEnvFunc`). NCCL
        finds the home directory with getpwuid(); the probe uses the process's $HOME.
        """
        if self.environ is not None and key in self.environ:
            return self.environ[key], "environment"
        if self.user_conf is not None:
            value = parse_kv_conf(self.user_conf).get(key)
            if value is not None:
                named = bool(self.environ and self.environ.get("NCCL_CONF_FILE"))
                return value, "$NCCL_CONF_FILE" if named else "~/.nccl.conf"
        if self.system_conf is not None:
            value = parse_kv_conf(self.system_conf).get(key)
            if value is not None:
                return value, f"{SYSTEM_NCCL_CONF} in the process's mount namespace"
        return default, "NCCL's default" if default is not None else "unset"


def _parse_or_error(errors: dict[str, str], name: str, text: str | None, parser):  # type: ignore[no-untyped-def]
    if text is None:
        errors[name] = f"/proc/PID/{name} unreadable"
        return None
    try:
        return parser(text)
    except ValueError as exc:
        errors[name] = f"unreadable /proc/PID/{name}: {exc}"
        return None


def serving_processes(section_text: str) -> list[ServingProcess]:
    """Every process in the runtime section, PID order (pure)."""
    out: list[ServingProcess] = []
    for pid, records in sorted(parse_probe(section_text).items()):
        files = records.files
        if files.get("cmdline") is None:
            continue  # ended between the search and the read
        errors: dict[str, str] = {}
        maps = _parse_or_error(errors, "maps", files.get("maps"), parse_maps_files)
        out.append(
            ServingProcess(
                pid=pid,
                args=parse_cmdline_args(files["cmdline"] or ""),
                environ=_parse_or_error(errors, "environ", files.get("environ"), parse_environ),
                cpus=_parse_or_error(errors, "status", files.get("status"), parse_status_cpus),
                cgroup=_parse_or_error(errors, "cgroup", files.get("cgroup"), parse_cgroup),
                libraries=maps or (),
                library_sha256=dict(records.hashes),
                user_conf=files.get("user-conf"),
                system_conf=files.get("system-conf"),
                errors=errors,
            )
        )
    return out
