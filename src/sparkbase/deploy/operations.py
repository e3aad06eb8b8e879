"""pyinfra operations sparkbase needs beyond pyinfra's own.

Each reads facts, compares with what the baseline wants, then yields commands, or records
a no-op with its reason (`host.noop`, kept in `NOOP_REASONS` for plan/apply reports).
Commands are built from quoted arguments. Operations that depend on an earlier file step
take that step's `OperationMeta` (`trigger`) and act when it changed (or will change).
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
import shlex
import uuid
from collections.abc import Iterable
from io import BytesIO
from typing import Any, NamedTuple

from pyinfra import logger
from pyinfra.api.command import FileUploadCommand, StringCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.api.operation import operation
from pyinfra.context import host, state
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import Directory

from sparkbase.deploy.facts import (
    TEMP_SUFFIX,
    ActiveSwaps,
    BootState,
    DefaultTarget,
    DkmsState,
    FileState,
    FileText,
    GrubConfig,
    HeldPackages,
    MokState,
    SwapFile,
    Sysctls,
    ThpMode,
    UnitState,
)
from sparkbase.deploy.ownership_fact import OwnedRecord, SwapUuid
from sparkbase.facts.model import GrubBoot, MokCertificate
from sparkbase.facts.signing import judge_signature
from sparkbase.policy.ownership import (
    OWNERSHIP_DIR,
    OWNERSHIP_PATH,
    Kind,
    OwnedItem,
    OwnershipRecord,
    created,
    decide_identified,
    now_utc,
)

#: host name -> operation hash -> the reason the operation did nothing
NOOP_REASONS: dict[str, dict[str, str]] = {}


def _noop(reason: str) -> None:
    """Record and log why the current operation changes nothing."""
    op_hash = host.current_op_hash
    if op_hash:
        NOOP_REASONS.setdefault(host.name, {})[op_hash] = reason
    host.noop(reason)


def _cmd(*words: str) -> StringCommand:
    """One shell command from separate words, each quoted."""
    return StringCommand(" ".join(shlex.quote(word) for word in words))


class Decision(NamedTuple):
    """What an operation does: commands (argv lists), or why it does nothing; and the
    ownership record entries to forget once the commands ran (retire operations)."""

    commands: list[list[str]]
    reason: str = ""
    forget: tuple[tuple[Kind, str], ...] = ()


def carry_out(decision: Decision) -> Any:
    """Yield the decision's commands, or record its no-op reason."""
    if not decision.commands:
        _noop(decision.reason)
    for argv in decision.commands:
        yield _cmd(*argv)


def changed(meta: Any) -> bool:
    """Whether an earlier operation changed (when executed) or will change (when planned)."""
    if meta is None:
        return False
    if meta.is_complete():
        return bool(meta.did_change())
    return bool(meta.will_change)


# --- packages ---------------------------------------------------------------------------


def missing_pins(pins: list[str], installed: dict[str, list[str]]) -> list[str]:
    """`name=version` pins not installed at exactly that version."""
    missing = []
    for pin in pins:
        name, _, version = pin.partition("=")
        if version not in installed.get(name, []):
            missing.append(pin)
    return missing


@operation()
def apt_update_for(pins: list[str]) -> Any:
    """`apt-get update`, only when a pinned package is not installed at its version."""
    missing = missing_pins(pins, host.get_fact(DebPackages) or {})
    if not missing:
        _noop(f"all {len(pins)} pinned packages are installed at their versions")
        return
    yield "DEBIAN_FRONTEND=noninteractive apt-get update -q"


#: apt-get install options: keep local config files, allow a pin to move a held package up or down
APT_INSTALL = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q",
               "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
               "install", "--allow-downgrades", "--allow-change-held-packages"]


@operation()
def pinned_packages(pins: list[str], baseline: str = "") -> Any:
    """Install `name=version` pins not installed at that version; the packages that were not
    installed at all before are recorded as sparkbase's (a package it only moved is not)."""
    installed = host.get_fact(DebPackages) or {}
    missing = missing_pins(pins, installed)
    if not missing:
        _noop(f"all {len(pins)} pinned packages are installed at their versions")
        return
    yield _cmd(*APT_INSTALL, *missing)
    now = now_utc()
    new = [pin.partition("=") for pin in missing if not installed.get(pin.partition("=")[0])]
    yield from remember(*(created(Kind.PACKAGE, name, baseline, now, version=version)
                          for name, _, version in new))


@operation()
def hold(names: list[str]) -> Any:
    """`apt-mark hold` the pinned packages that are not held yet."""
    holds: list[str] = host.get_fact(HeldPackages)
    held = set(holds)
    todo = [name for name in names if name not in held]
    if not todo:
        _noop(f"all {len(names)} pinned packages are held")
        return
    yield _cmd("apt-mark", "hold", *todo)


# --- files ------------------------------------------------------------------------------


def _diff(path: str, old: str | None, new: str) -> list[str]:
    return list(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{path} (node)" if old is not None else "/dev/null",
            tofile=f"{path} (baseline)",
        )
    )


def _leftover(path: str, leftover: bool) -> Any:
    """Remove the half-done upload an interrupted run left beside an up-to-date `path`."""
    if leftover:
        yield _cmd("rm", "-f", path + TEMP_SUFFIX)


def _atomic_upload(src: Any, path: str, mode: int, sha256: str | None, temp: str) -> Any:
    """Upload to `temp` next to `path`, check it, set its mode, then rename over `path`."""
    yield FileUploadCommand(src, temp)
    if sha256 is not None:
        line = f"printf '%s  %s\\n' {shlex.quote(sha256)} {shlex.quote(temp)}"
        yield StringCommand(f"{line} | sha256sum -c --quiet -")
    yield _cmd("chmod", f"{mode:o}", temp)
    yield _cmd("mv", "-f", temp, path)


# --- the ownership record ---------------------------------------------------------------
# Read live, after the commands that created or removed something ran (code after an
# operation's first yield only runs when it executes), then written atomically.


def _write_record(record: OwnershipRecord) -> Any:
    data = record.to_json().encode()
    yield _cmd("install", "-d", "-m", "700", OWNERSHIP_DIR)
    yield from _atomic_upload(BytesIO(data), OWNERSHIP_PATH, 0o600, hashlib.sha256(data).hexdigest(),
                              OWNERSHIP_PATH + TEMP_SUFFIX)


def remember(*items: OwnedItem, only_if_recorded: bool = False) -> Any:
    """Record `items` as created by sparkbase (with `only_if_recorded`: update them only where
    the record already holds them, e.g. a file sparkbase rewrote but did not create)."""
    record: OwnershipRecord = host.get_fact(OwnedRecord)
    if only_if_recorded:
        items = tuple(item for item in items if record.find(item.kind, item.target) is not None)
    if items:
        yield from _write_record(record.with_items(items))


def forget(keys: Iterable[tuple[Kind, str]]) -> Any:
    """Drop removed items from the record."""
    record: OwnershipRecord = host.get_fact(OwnedRecord)
    updated = record.without(keys)
    if updated != record:
        yield from _write_record(updated)


@operation()
def file(path: str, content: str, mode: int, sha256: str, secret: bool = False, baseline: str = "") -> Any:
    """`path` holds exactly `content` with `mode`; written to a temp file, then renamed (and
    recorded as sparkbase's when it created the file)."""
    current = host.get_fact(FileState, path=path)
    if current is not None and current.sha256 == sha256:
        yield from _leftover(path, current.leftover)
        if current.mode == mode:
            if not current.leftover:
                _noop(f"{path} is identical (sha256 {sha256[:12]}, mode {mode:o})")
            return
        yield _cmd("chmod", f"{mode:o}", path)
        return
    if state.config.DIFF and not secret:
        old = host.get_fact(FileText, path=path) if current is not None else None
        for line in _diff(path, old, content):
            logger.info("    %s", line.rstrip("\n"))
    if current is None:
        yield _cmd("mkdir", "-p", posixpath.dirname(path))
    yield from _atomic_upload(BytesIO(content.encode()), path, mode, sha256, path + TEMP_SUFFIX)
    yield from remember(created(Kind.FILE, path, baseline, now_utc(), sha256=sha256),
                        only_if_recorded=current is not None)


@operation()
def upload(path: str, local: str, mode: int, sha256: str, baseline: str = "") -> Any:
    """Operator file `local` lands at `path` with `mode`; never diffed or printed.

    Used for the MOK key pair: the temp file sits in the (0700) target directory, and its
    mode is set before the rename, so the key is never readable by others, even briefly.
    """
    current = host.get_fact(FileState, path=path)
    if current is not None and current.sha256 == sha256:
        yield from _leftover(path, current.leftover)
        if current.mode == mode:
            if not current.leftover:
                _noop(f"{path} is in place (mode {mode:o})")
            return
        yield _cmd("chmod", f"{mode:o}", path)
        return
    yield from _atomic_upload(local, path, mode, sha256, path + TEMP_SUFFIX)
    yield from remember(created(Kind.FILE, path, baseline, now_utc(), sha256=sha256),
                        only_if_recorded=current is not None)


@operation()
def directory(path: str, mode: int, baseline: str = "") -> Any:
    """A directory owned by root with exactly `mode` (recorded as sparkbase's when it created it)."""
    info = host.get_fact(Directory, path=path)
    if info and info.get("mode") == int(f"{mode:o}"):
        _noop(f"{path} exists with mode {mode:o}")
        return
    yield _cmd("install", "-d", "-m", f"{mode:o}", path)
    if not info:
        yield from remember(created(Kind.DIRECTORY, path, baseline, now_utc()))


# --- Secure Boot / MOK / DKMS -----------------------------------------------------------


@operation()
def mok_import(certificate: str, fingerprint: str) -> Any:
    """`mokutil --import` the certificate unless enrolled or already pending."""
    mok = host.get_fact(MokState)
    if fingerprint in mok["enrolled"]:
        _noop(f"MOK {fingerprint[:11]}… is enrolled")
        return
    if fingerprint in mok["pending"]:
        _noop(f"MOK {fingerprint[:11]}… is pending enrolment (completes at the next reboot)")
        return
    yield _cmd("mokutil", "--import", certificate, "--root-pw")


def decide_dkms_install(dkms_name: str, version: str, kernel: str, current: dict[str, Any],
                        certificates: list[MokCertificate], fingerprint: str | None) -> Decision:
    """Install the module for `kernel` unless DKMS has it installed and (with a pinned MOK)
    kmod reports it signed by that certificate (serial and issuer, as the audit judges it);
    a wrongly signed build is reinstalled with `--force`, which re-signs it."""
    target = f"{dkms_name}/{version}"
    install = ["dkms", "install", target, "-k", kernel]
    if not current["installed"]:
        return Decision([install])
    if fingerprint is None:
        return Decision([], f"{target} is installed for {kernel}")
    verdict = judge_signature(current["info"], tuple(certificates), fingerprint)
    if verdict.ok:
        return Decision([], f"{target} is installed for {kernel}, {verdict.detail}")
    return Decision([[*install, "--force"]], f"{target} for {kernel}: {verdict.detail}")


@operation()
def dkms_install(dkms_name: str, version: str, kernel: str, module: str, fingerprint: str | None,
                 baseline: str = "") -> Any:
    """Build, sign and install a DKMS module for `kernel` (the target, not the running one)."""
    current = host.get_fact(DkmsState, dkms_name=dkms_name, version=version, kernel=kernel, module=module)
    mok = host.get_fact(MokState) if fingerprint is not None and current["installed"] else None
    # a MOK imported by this run's earlier step is pending until the reboot: it counts
    certificates = [*mok["certificates"], *mok["pending_certificates"]] if mok else []
    yield from carry_out(decide_dkms_install(dkms_name, version, kernel, current, certificates, fingerprint))
    if not current["installed"]:
        yield from remember(created(Kind.DKMS, f"{dkms_name}/{version}", baseline, now_utc()))


# --- activation ---------------------------------------------------------------------------


def grub_stale(grub: GrubBoot, release: str, default_entry: str | None, cmdline: list[str],
               forbid: list[str]) -> str | None:
    """Why grub.cfg does not reflect the baseline (None when it does). With `default_entry`
    (the baseline pins GRUB's default), the default must boot `release`, however GRUB names
    it (title path, entry id, index, `${saved_entry}`), as the audit judges it."""
    entry = next((e for e in grub.entries if e.release == release and not e.recovery), None)
    if entry is None:
        return f"grub.cfg has no entry for {release}"
    booted = grub.default_entry.release if grub.default_entry else None
    if default_entry is not None and booted != release:
        return f"grub.cfg default {grub.default!r} boots {booted or 'no entry'}"
    missing = [arg for arg in cmdline if arg not in entry.args]
    if missing:
        return f"{release} entry lacks {' '.join(missing)}"
    bad = [arg for arg in entry.args if arg in forbid or arg.split("=")[0] in forbid]
    if bad:
        return f"{release} entry carries forbidden {' '.join(bad)}"
    return None


@operation()
def grub_update(release: str, default_entry: str | None, cmdline: list[str], forbid: list[str],
                trigger: Any = None) -> Any:
    """`update-grub` when the drop-in changed or grub.cfg does not match the baseline."""
    reason = "the GRUB drop-in changed" if changed(trigger) else None
    reason = reason or grub_stale(host.get_fact(GrubConfig), release, default_entry, cmdline, forbid)
    if reason is None:
        _noop(f"grub.cfg boots {release} with the baseline's arguments")
        return
    yield "update-grub"


@operation()
def sysctl_apply(file: str, values: dict[str, str]) -> Any:
    """`sysctl -p FILE` when a live value differs from the baseline."""
    if not values:
        _noop("the baseline sets no sysctls")
        return
    live = host.get_fact(Sysctls, keys=tuple(values))
    differ = [key for key, value in values.items() if live.get(key) != " ".join(value.split())]
    if not differ:
        _noop(f"all {len(values)} sysctls hold their values")
        return
    yield _cmd("sysctl", "-p", file)


@operation()
def after_change(command: list[str], what: str, trigger: Any = None) -> Any:
    """Run `command` when the file operation `trigger` changed (or will)."""
    if not changed(trigger):
        _noop(f"{what} did not change")
        return
    yield _cmd(*command)


# --- swap -------------------------------------------------------------------------------


class NotSparkbases(ValueError):
    """Something sparkbase would have to overwrite is there and is not sparkbase's."""


def decide_swap_file(path: str, size_gib: int, header_page_size: int, found: dict[str, Any] | None,
                     uuid: str | None, active: bool, owned: OwnershipRecord, new_uuid: str) -> Decision:
    """Make the swap file (mkswap writes `new_uuid`, which the record keeps); a file at the
    path that is not the right swap file is remade only when sparkbase created it, unchanged:
    anything else raises `NotSparkbases`, and nothing is touched."""
    size = size_gib * 1024**3
    if found is not None and found["size"] == size and found["header_page_size"] == header_page_size:
        if found["mode"] == 0o600:
            return Decision([], f"{path} is {size_gib} GiB with a {header_page_size}-byte header")
        return Decision([["chmod", "600", path]])
    if found is not None:
        verdict = decide_identified(Kind.SWAP, path, True, uuid, owned)
        if not verdict.removable:
            raise NotSparkbases(f"{path} exists ({found['size']} bytes) and was {verdict.verdict.value}: "
                                "sparkbase will not overwrite it; move it away, then apply again")
    commands = []
    if found is not None and active:
        commands.append(["swapoff", path])
    if found is not None and found["size"] != size:
        commands.append(["rm", "-f", "--", path])
    return Decision([*commands, ["fallocate", "-l", f"{size_gib}G", path], ["chmod", "600", path],
                     ["mkswap", "-U", new_uuid, "-p", str(header_page_size), path]])


@operation()
def swap_file(path: str, size_gib: int, header_page_size: int, baseline: str = "") -> Any:
    """The swap file exists at its size, mode 0600, with a header for `header_page_size`;
    recorded (with the UUID in its header) as sparkbase's when sparkbase makes it."""
    info = host.get_fact(SwapFile, path=path)
    uuid_now = host.get_fact(SwapUuid, path=path) if info is not None else None
    active = info is not None and path in host.get_fact(ActiveSwaps)
    owned = host.get_fact(OwnedRecord) if info is not None else OwnershipRecord()
    new_uuid = str(uuid.uuid4())
    try:
        decision = decide_swap_file(path, size_gib, header_page_size, info, uuid_now, active, owned, new_uuid)
    except NotSparkbases as exc:
        raise OperationError(str(exc)) from None
    yield from carry_out(decision)
    if any(argv[0] == "mkswap" for argv in decision.commands):
        yield from remember(created(Kind.SWAP, path, baseline, now_utc(), uuid=new_uuid))


@operation()
def swapon(path: str, header_page_size: int) -> Any:
    """`swapon` the file, only when the running page size matches its header."""
    if path in host.get_fact(ActiveSwaps):
        _noop(f"{path} is active")
        return
    running = host.get_fact(BootState)["page_size"]
    if running != header_page_size:
        _noop(f"running page size {running} differs from the {header_page_size}-byte header: "
              "the swap activates at boot (reboot pending)")
        return
    yield _cmd("swapon", path)


# --- live settings and services -----------------------------------------------------------


@operation()
def thp(value: str) -> Any:
    """Transparent hugepages set live (the kernel command line sets it at boot)."""
    current = host.get_fact(ThpMode)
    if current == value:
        _noop(f"transparent hugepages are {value}")
        return
    yield StringCommand(f"echo {shlex.quote(value)} > /sys/kernel/mm/transparent_hugepage/enabled")


@operation()
def default_target(target: str) -> Any:
    """`systemctl set-default`."""
    if host.get_fact(DefaultTarget) == target:
        _noop(f"default target is {target}")
        return
    yield _cmd("systemctl", "set-default", target)


@operation()
def unit_disabled(unit: str) -> Any:
    """The unit is neither enabled nor running (`disable --now`)."""
    current = host.get_fact(UnitState, unit=unit)
    # `static` units cannot be disabled, only stopped (the audit's `enabled` counts them)
    enabled = current.unit_file_state in ("enabled", "enabled-runtime", "alias")
    active = current.active_state == "active"
    if not current.unit_file_state and not active:
        _noop(f"{unit} is not installed")
        return
    if not enabled and not active:
        _noop(f"{unit} is {current.unit_file_state} and inactive")
        return
    yield _cmd("systemctl", "disable" if enabled else "stop", *(["--now"] if enabled else []), unit)


@operation()
def unit_enabled(unit: str, baseline: str = "") -> Any:
    """The unit is enabled and running (`enable --now`); recorded as sparkbase's when it was
    not enabled before (so other baselines' nodes disable it only then)."""
    current = host.get_fact(UnitState, unit=unit)
    if current.unit_file_state == "enabled" and current.active_state == "active":
        _noop(f"{unit} is enabled and active")
        return
    yield _cmd("systemctl", "enable", "--now", unit)
    if current.unit_file_state != "enabled":
        yield from remember(created(Kind.UNIT, unit, baseline, now_utc()))
