"""`systemctl`: unit enablement as real symlinks, the active set in /run (no systemd runs).

The read-only forms the audit asks (`show -p P... UNIT...`, `get-default`, `is-enabled`,
`is-active`) use only `os`; enabling and disabling write the links systemd would.
"""

from __future__ import annotations

import os
import sys

from sparkbase_lab.shims.common import (
    ACTIVE,
    RUN,
    SYSTEMD_ETC,
    SYSTEMD_LIB,
    Fail,
    read_json,
    read_text,
    sorted_conf,
    write_json,
    write_text,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

#: units that are always running (sparkbase reaches the node through them)
ALWAYS_ACTIVE = ("ssh.service", "sshd.service")
#: what systemd loaded at the last boot or daemon-reload: unit -> its files' (path, mtime)
LOADED = f"{RUN}/systemd-loaded.json"
#: where drop-ins of a unit are read from, in order
DROPIN_BASES = (SYSTEMD_LIB, SYSTEMD_ETC, "/run/systemd/system")


#: the manager's own settings as PID 1 read them at boot or at `daemon-reexec`
MANAGER = f"{RUN}/systemd-manager.json"
#: what PID 1 runs with when system.conf sets nothing (systemd-system.conf(5)): no runtime
#: watchdog, a 10 min reboot watchdog
MANAGER_DEFAULTS = {"RuntimeWatchdogUSec": "0", "RebootWatchdogUSec": "10min"}
#: system.conf setting -> the property `systemctl show` names it by
MANAGER_SETTINGS = {"RuntimeWatchdogSec": "RuntimeWatchdogUSec", "RebootWatchdogSec": "RebootWatchdogUSec",
                    "ShutdownWatchdogSec": "RebootWatchdogUSec"}
_SPAN_UNITS = (("d", 86_400_000_000), ("h", 3_600_000_000), ("min", 60_000_000), ("s", 1_000_000),
               ("ms", 1_000), ("us", 1))
_SPAN_WORDS = {"us": 1, "ms": 1_000, "s": 1_000_000, "sec": 1_000_000, "m": 60_000_000,
               "min": 60_000_000, "h": 3_600_000_000, "hr": 3_600_000_000, "d": 86_400_000_000}


def timespan(value: str) -> str:
    """A system.conf time span (`30`, `30s`, `600s`, `1min 30s`, `off`) as `systemctl show`
    prints it (`30s`, `10min`, `1min 30s`, `0`)."""
    import re

    value = value.strip()
    if value in ("off", "0", ""):
        return "0"
    if value == "infinity":
        return value
    usec = sum(int(n) * _SPAN_WORDS[unit or "s"]
               for n, unit in re.findall(r"([0-9]+)\s*(us|ms|sec|min|hr|s|m|h|d)?", value))
    parts = []
    for name, size in _SPAN_UNITS:
        if usec >= size:
            parts.append(f"{usec // size}{name}")
            usec %= size
    return " ".join(parts) or "0"


def load_manager() -> dict[str, str]:
    """Read system.conf and system.conf.d/*.conf (`[Manager]`) as PID 1 does at boot and at
    `daemon-reexec`, and keep what it read."""
    props = dict(MANAGER_DEFAULTS)
    for text in [read_text("/etc/systemd/system.conf"), *sorted_conf("/etc/systemd/system.conf.d/*.conf")]:
        for line in text.splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key.strip() in MANAGER_SETTINGS:
                props[MANAGER_SETTINGS[key.strip()]] = timespan(value)
    write_json(MANAGER, props)
    return props


def unit_path(unit: str) -> str | None:
    """Where a unit file (or its link) is: /etc/systemd/system first, then /lib."""
    for base in (SYSTEMD_ETC, SYSTEMD_LIB):
        path = f"{base}/{unit}"
        if os.path.lexists(path):
            return path
    return None


def _listdir(path: str) -> list[str]:
    """The visible names in a directory ([] when it is missing)."""
    try:
        return [name for name in os.listdir(path) if not name.startswith(".")]
    except OSError:
        return []


def install_section(path: str) -> dict[str, list[str]]:
    """The `[Install]` keys of a unit file (WantedBy, RequiredBy, Alias...)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in read_text(path).splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
            continue
        if section == "[Install]" and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).extend(value.split())
    return out


def unit_file_state(unit: str) -> str | None:
    """`systemctl is-enabled` as systemd decides it from the links; None: no such unit."""
    etc = f"{SYSTEMD_ETC}/{unit}"
    if os.path.islink(etc) and os.readlink(etc) == "/dev/null":
        return "masked"
    path = unit_path(unit)
    if path is None:
        return None
    names = _listdir(SYSTEMD_ETC)
    if any(name.endswith(".wants") and os.path.lexists(f"{SYSTEMD_ETC}/{name}/{unit}") for name in names):
        return "enabled"
    real = os.path.realpath(path)
    for name in names:
        link = f"{SYSTEMD_ETC}/{name}"
        if name.endswith(".service") and name != unit and os.path.islink(link) \
                and os.path.realpath(link) == real:
            return "enabled"
    if os.path.islink(etc) and os.path.realpath(etc) != etc and unit != os.path.basename(real):
        return "alias"
    return "disabled" if install_section(real) else "static"


def active_units() -> set[str]:
    """Units running now (recomputed at every boot and start/stop)."""
    return {line.strip() for line in read_text(ACTIVE).splitlines() if line.strip()}


def unit_files(unit: str) -> list[str]:
    """The unit's fragment (a link resolved) and its drop-ins, as systemd reads them."""
    path = unit_path(unit)
    files = [os.path.realpath(path)] if path is not None else []
    for base in DROPIN_BASES:
        directory = f"{base}/{unit}.d"
        files += sorted(f"{directory}/{n}" for n in _listdir(directory) if n.endswith(".conf"))
    return files


def _signature(unit: str) -> list[list[str | int]]:
    """The unit's files and their modification times (what systemd compares)."""
    out: list[list[str | int]] = []
    for name in unit_files(unit):
        if name == "/dev/null":  # a mask: the link is what counts, not the device's times
            out.append([name, 0])
            continue
        try:
            out.append([name, os.stat(name).st_mtime_ns])
        except OSError:
            out.append([name, -1])
    return out


def record_loaded() -> None:
    """Load every unit as it is on disk now (a boot, `daemon-reload`, or the reload
    `systemctl enable`/`disable`/`mask` does itself)."""
    units = {name for base in (SYSTEMD_LIB, SYSTEMD_ETC) for name in _listdir(base)
             if "." in name and not name.endswith((".wants", ".requires", ".d"))}
    write_json(LOADED, {unit: _signature(unit) for unit in sorted(units)})


def need_daemon_reload(unit: str) -> str:
    """`NeedDaemonReload`: `yes` when the unit's files changed on disk (or a drop-in came
    or went) since systemd loaded it; a unit systemd did not have loaded is loaded when it
    is asked about, as it is on disk (`no`)."""
    loaded = read_json(LOADED, {})
    if not isinstance(loaded, dict) or unit not in loaded:
        return "no"
    return "yes" if loaded[unit] != _signature(unit) else "no"


def show(unit: str, prop: str) -> str:
    """One property as `systemctl show -p PROP UNIT` prints its value."""
    if prop == "ActiveState":
        path = unit_path(unit)
        real = os.path.basename(os.path.realpath(path)) if path is not None else unit
        active = active_units()
        if real in failed_units() or unit in failed_units():
            return "failed"
        return "active" if real in active or unit in active else "inactive"
    if prop == "UnitFileState":
        return unit_file_state(unit) or ""
    if prop == "Id":
        return unit
    if prop == "NeedDaemonReload":
        return need_daemon_reload(unit)
    value = ""
    cpu_set = prop in CPU_SET_PROPERTIES
    for name in unit_files(unit):
        for raw in read_text(name).splitlines():
            key, sep, val = raw.strip().partition("=")
            if sep and key.strip() == prop:
                # a CPU set grows with each assignment; an empty one resets it (systemd.resource-control)
                value = f"{value} {val.strip()}" if cpu_set and val.strip() else val.strip()
    return cpu_range_string(value) if cpu_set else value


#: properties systemd stores as a CPU (or NUMA node) set and prints through
#: `cpu_set_to_range_string()`: ranges joined by spaces (`5-9 15-19`)
CPU_SET_PROPERTIES = frozenset({"AllowedCPUs", "StartupAllowedCPUs", "CPUAffinity",
                                "AllowedMemoryNodes", "StartupAllowedMemoryNodes", "NUMAMask"})
#: the largest CPU index read (systemd's own cap is 8192 CPUs)
MAX_CPU = 8191


def cpu_range_string(value: str) -> str:
    """A unit file's CPU list (`5-9,15-19`, `5 6 7`) as systemd prints it: sorted ranges,
    joined by spaces (`5-9 15-19`); an unreadable list prints empty, as systemd ignores it."""
    cpus: set[int] = set()
    for word in value.replace(",", " ").split():
        low, sep, high = word.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            return ""
        first, last = int(low), int(high) if sep else int(low)
        if last < first or last > MAX_CPU:
            return ""
        cpus.update(range(first, last + 1))
    ranges: list[str] = []
    for cpu in sorted(cpus):
        if ranges and cpu - 1 in cpus:
            start = ranges[-1].split("-")[0]
            ranges[-1] = f"{start}-{cpu}"
        else:
            ranges.append(str(cpu))
    return " ".join(ranges)


def default_target() -> str:
    """The default systemd target: where /etc/systemd/system/default.target points."""
    link = f"{SYSTEMD_ETC}/default.target"
    if os.path.islink(link):
        return os.path.basename(os.readlink(link))
    return "graphical.target"


#: systemd's unit types: a name ending in none of them is a service (`unit_name_mangle`)
UNIT_TYPES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer",
              "slice", "scope")


def unit_name(unit: str) -> str:
    """A unit name with its type, as systemctl completes it (`foo` and `snapd.seeded` ->
    `foo.service`, `snapd.seeded.service`)."""
    return unit if unit.rpartition(".")[2] in UNIT_TYPES and "." in unit else unit + ".service"


def _is_enabled(unit: str) -> str:
    value = unit_file_state(unit)
    if value is None:
        raise Fail(f"Failed to get unit file state for {unit}: No such file or directory", 1)
    return value


#: units whose last start failed (`ActiveState=failed` until started again or reset)
FAILED = f"{RUN}/failed"
#: systemd's PATH for the commands a unit runs
UNIT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def failed_units() -> set[str]:
    """Units whose last run failed."""
    return {line.strip() for line in read_text(FAILED).splitlines() if line.strip()}


def _service_keys(unit: str) -> dict[str, list[str]]:
    """The `[Service]` keys of a unit file (every ExecStart= line kept, in order)."""
    path = unit_path(unit)
    out: dict[str, list[str]] = {}
    section = ""
    for raw in read_text(os.path.realpath(path)).splitlines() if path is not None else []:
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def runs_commands(unit: str) -> bool:
    """Whether the lab runs the unit's commands: `Type=oneshot` and `Type=idle` services
    (short tasks such as DGX OS's tuning units); daemons are only marked running."""
    return _service_keys(unit).get("Type", ["simple"])[-1] in ("oneshot", "idle")


def _run_commands(unit: str, key: str) -> bool:
    """Run the unit's `key` (ExecStart, ExecStop) commands in order, as systemd does (a `-`
    prefix ignores a failure); False when one failed."""
    import shlex
    import subprocess

    env = {**os.environ, "PATH": UNIT_PATH}
    for command in _service_keys(unit).get(key, []):
        ignore = command.startswith("-")
        argv = shlex.split(command.lstrip("-@+!:"))
        try:
            status = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, check=False).returncode
        except OSError:
            status = 203  # systemd's EXEC status: the program could not be run
        if status != 0 and not ignore:
            return False
    return True


def run_unit(unit: str, start: bool, active: set[str]) -> bool:
    """Start (ExecStart) or stop (ExecStop) a unit whose commands the lab runs; the active
    and failed sets follow: a oneshot/idle service without RemainAfterExit= is inactive
    once its command exited; a failed start leaves it `failed`. False: the start failed."""
    real = resolve_alias(unit)
    failed = failed_units() - {real}
    ok = True
    if start:
        ok = _run_commands(unit, "ExecStart")
        remain = _service_keys(unit).get("RemainAfterExit", ["no"])[-1] in ("yes", "true", "1")
        (active.add if ok and remain else active.discard)(real)
        if not ok:
            failed.add(real)
    else:
        if real in active:
            _run_commands(unit, "ExecStop")
        active.discard(real)
    write_text(FAILED, "".join(f"{u}\n" for u in sorted(failed)))
    return ok


def start_failed(unit: str) -> Fail:
    """What systemctl prints when a unit's start fails."""
    return Fail(f"Job for {unit} failed because the control process exited with error code.\n"
                f"See \"systemctl status {unit}\" and \"journalctl -xeu {unit}\" for details.", 1)


def boot_units(active: set[str]) -> None:
    """At boot: run the commands of every started oneshot/idle unit (idle ones last)."""
    write_text(FAILED, "")
    units = sorted((u for u in active if runs_commands(u)),
                   key=lambda u: (_service_keys(u).get("Type", [""])[-1] == "idle", u))
    for unit in units:
        run_unit(unit, True, active)


def set_active(units: set[str]) -> None:
    """Replace the set of running units."""
    write_text(ACTIVE, "".join(f"{u}\n" for u in sorted(units)))


def resolve_alias(unit: str) -> str:
    """The unit an alias (or the unit itself) names."""
    path = unit_path(unit)
    return os.path.basename(os.path.realpath(path)) if path is not None else unit


def compute_active(target: str) -> list[str]:
    """The units running after a boot into `target`."""
    from sparkbase_lab.shims.common import glob

    active = set(ALWAYS_ACTIVE)
    # a Spark has Bluetooth hardware, so bluetooth.target is reached at every boot (as
    # timers.target is: an enabled timer is active; and swap.target and sockets.target,
    # which every boot reaches before multi-user.target)
    for wants in ("multi-user.target.wants", "bluetooth.target.wants", "timers.target.wants",
                  "swap.target.wants", "sockets.target.wants"):
        for link in glob(f"{SYSTEMD_ETC}/{wants}/*"):
            active.add(os.path.basename(link))
    if target == "graphical.target":
        for link in glob(f"{SYSTEMD_ETC}/graphical.target.wants/*"):
            active.add(os.path.basename(link))
        dm = f"{SYSTEMD_ETC}/display-manager.service"
        if os.path.lexists(dm):
            active.add("display-manager.service")
            active.add(os.path.basename(os.path.realpath(dm)))
    return sorted(active)


def _enable(unit: str, enable: bool) -> None:
    path = unit_path(unit)
    if path is None:
        raise Fail(f"Failed to enable unit: Unit file {unit} does not exist.", 1)
    real = os.path.realpath(path)
    base = os.path.basename(real)
    install = install_section(real)
    if not install:
        print("The unit files have no installation config (WantedBy=, RequiredBy=, Also=,\n"
              "Alias= settings in the [Install] section, and DefaultInstance= for template\n"
              "units). This means they are not meant to be enabled or disabled using systemctl.",
              file=sys.stderr)
        return
    links = [f"{SYSTEMD_ETC}/{t}.wants/{base}" for t in install.get("WantedBy", [])]
    links += [f"{SYSTEMD_ETC}/{t}.requires/{base}" for t in install.get("RequiredBy", [])]
    links += [f"{SYSTEMD_ETC}/{alias}" for alias in install.get("Alias", [])]
    for link in links:
        if enable:
            if not os.path.islink(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(real, link)
                print(f"Created symlink {link} \u2192 {real}.", file=sys.stderr)
        elif os.path.islink(link):
            os.unlink(link)
            print(f"Removed \"{link}\".", file=sys.stderr)


def _show_blocks(argv: list[str]) -> int:
    """`systemctl show -p P [-p P...] [--value] UNIT...`: one block per unit, blank line between."""
    props: list[str] = []
    units: list[str] = []
    value_only = False
    words = iter(argv[1:])
    for word in words:
        if word in ("-p", "--property"):
            props += next(words, "").split(",")
        elif word.startswith("--property="):
            props += word.split("=", 1)[1].split(",")
        elif word == "--value":
            value_only = True
        elif not word.startswith("-"):
            units.append(unit_name(word))
    if not units:  # the manager's own properties
        manager = read_json(MANAGER, None) or load_manager()
        for prop in props:
            if prop in manager:
                print(manager[prop] if value_only else f"{prop}={manager[prop]}")
        return 0
    for index, unit in enumerate(units):
        if index and not value_only:
            print()
        for prop in props or ["ActiveState", "UnitFileState"]:
            value = show(unit, prop)
            print(value if value_only else f"{prop}={value}")
    return 0


def _set_default(units: list[str]) -> int:
    target = units[0] if units else ""
    if not os.path.exists(f"{SYSTEMD_LIB}/{target}"):
        raise Fail(f"Failed to set default target: Unit file {target} does not exist.")
    link = f"{SYSTEMD_ETC}/default.target"
    if os.path.islink(link):
        os.unlink(link)
    os.makedirs(SYSTEMD_ETC, exist_ok=True)
    os.symlink(f"{SYSTEMD_LIB}/{target}", link)
    print(f"Created symlink {link} \u2192 {SYSTEMD_LIB}/{target}.", file=sys.stderr)
    return 0


def _is_enabled_cmd(units: list[str], quiet: bool) -> int:
    status = 0
    for unit in units:
        try:
            value = _is_enabled(unit)
        except Fail as exc:
            if not quiet:
                print(str(exc), file=sys.stderr)
            status = 1
            continue
        if not quiet:
            print(value)
        if value not in ("enabled", "alias", "static"):
            status = 1
    return status


def _is_active_cmd(units: list[str], quiet: bool) -> int:
    active = active_units()
    status = 0
    for unit in units:
        on = unit in active or resolve_alias(unit) in active
        if not quiet:
            print("active" if on else "inactive")
        if not on:
            status = 3
    return status


def _start_stop(verb: str, units: list[str]) -> int:
    from sparkbase_lab.shims import cmd_serving  # subprocess, signal, time: not on `systemctl is-active`

    active = active_units()
    failed: list[str] = []
    for unit in units:
        path = unit_path(unit)
        if path is None:
            raise Fail(f"Failed to {verb} {unit}: Unit {unit} not found.", 5)
        running = verb != "stop" and (verb != "try-restart" or resolve_alias(unit) in active)
        if running and unit_file_state(unit) == "masked":
            raise Fail(f"Failed to {verb} {unit}: Unit {unit} is masked.", 1)
        if runs_commands(unit):
            if "restart" in verb and resolve_alias(unit) in active:
                run_unit(unit, False, active)
            # systemctl waits for a oneshot's command; other types return once it is spawned
            if not run_unit(unit, running, active) and _service_keys(unit).get("Type") == ["oneshot"]:
                failed.append(unit)
            continue
        serving = cmd_serving.is_serving_unit(path)  # a lane's unit: its process really runs
        if serving and (verb == "stop" or (running and "restart" in verb)):
            cmd_serving.stop_unit(unit)
        if serving and running:
            cmd_serving.start_unit(unit, path, lambda slice_unit: show(slice_unit, "AllowedCPUs"))
        (active.add if running else active.discard)(resolve_alias(unit))
    set_active(active)
    if failed:
        raise start_failed(failed[0])
    return 0


def _mask(verb: str, units: list[str], now: bool = False) -> int:
    if now and verb == "mask":
        _start_stop("stop", [u for u in units if unit_path(u) is not None])
    for unit in units:
        link = f"{SYSTEMD_ETC}/{unit}"
        if verb == "mask":
            if os.path.islink(link):
                os.unlink(link)
            os.symlink("/dev/null", link)
        elif os.path.islink(link) and os.readlink(link) == "/dev/null":
            os.unlink(link)
    return 0


def cmd_systemctl(argv: list[str]) -> int:
    """`systemctl` verbs a baseline uses (see docs/emulation.md)."""
    if argv and argv[0] == "show":
        return _show_blocks(argv)
    flags = [a for a in argv if a.startswith("-")]
    args = [a for a in argv if not a.startswith("-")]
    quiet = "-q" in flags or "--quiet" in flags
    if not args:
        raise Fail("systemctl: listing units is not emulated by the sparkbase lab", 1)
    verb, units = args[0], [unit_name(u) for u in args[1:]]
    if verb == "get-default":
        print(default_target())
        return 0
    if verb == "set-default":
        return _set_default(units)
    if verb in ("daemon-reload", "daemon-reexec"):
        record_loaded()
        if verb == "daemon-reexec":
            load_manager()
        return 0
    if verb == "reset-failed":
        return 0
    if verb in ("reboot", "kexec", "poweroff", "halt"):
        from sparkbase_lab.shims.cmd_power import cmd_poweroff, cmd_reboot

        return cmd_reboot([]) if verb in ("reboot", "kexec") else cmd_poweroff([])
    if verb == "is-enabled":
        return _is_enabled_cmd(units, quiet)
    if verb == "is-active":
        return _is_active_cmd(units, quiet)
    if verb in ("enable", "disable"):
        active = active_units()
        # the units as they resolve now: disabling removes an alias (display-manager.service)
        resolved = [resolve_alias(unit) if unit_path(unit) is not None else unit for unit in units]
        for unit in units:
            _enable(unit, verb == "enable")
        record_loaded()  # systemctl enable/disable reloads systemd itself
        set_active(active)
        if "--now" not in flags:
            return 0
        status = _start_stop("start" if verb == "enable" else "stop",
                             [unit for unit in resolved if unit_path(unit) is not None])
        if verb == "disable":  # an alias that is gone is stopped under its own name too
            set_active(active_units() - set(units))
        return status
    if verb in ("start", "stop", "restart", "reload", "try-restart", "reload-or-restart"):
        return _start_stop(verb, units)
    if verb in ("mask", "unmask"):
        status = _mask(verb, units, "--now" in flags)
        record_loaded()
        return status
    raise Fail(f"systemctl: {verb} is not emulated by the sparkbase lab", 1)


COMMANDS: dict[str, Callable[[list[str]], int]] = {"systemctl": cmd_systemctl}
