"""pyinfra operations sparkbase needs beyond pyinfra's own.

Each reads facts, compares with what the baseline wants, then yields commands, or records
a no-op with its reason (`host.noop`, kept in `NOOP_REASONS` for plan/apply reports).
Commands are built from quoted arguments. Operations that depend on an earlier file step
take that step's `OperationMeta` (`trigger`) and act when it changed (or will change).
"""

from __future__ import annotations

import difflib
import posixpath
import shlex
from io import BytesIO
from typing import Any, NamedTuple

from pyinfra import logger
from pyinfra.api.command import FileUploadCommand, StringCommand
from pyinfra.api.operation import operation
from pyinfra.context import host, state
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import Directory, FindInFile

from sparkbase.deploy.facts import (
    TEMP_SUFFIX,
    ActiveSwaps,
    BootState,
    DefaultTarget,
    DkmsBuilds,
    DkmsState,
    FileState,
    FileText,
    GrubConfig,
    HeldPackages,
    MokKeyDir,
    MokState,
    SwapFile,
    Sysctls,
    ThpMode,
    UnitState,
)
from sparkbase.deploy.results import DEFERRED, KEPT
from sparkbase.facts.model import GrubBoot, MokCertificate
from sparkbase.facts.signing import judge_signature

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


@operation()
def file(path: str, content: str, mode: int, sha256: str, secret: bool = False) -> Any:
    """`path` holds exactly `content` with `mode`; written to a temp file, then renamed."""
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


@operation()
def upload(path: str, local: str, mode: int, sha256: str) -> Any:
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


@operation()
def directory(path: str, mode: int) -> Any:
    """A directory owned by root with exactly `mode`."""
    info = host.get_fact(Directory, path=path)
    if info and info.get("mode") == int(f"{mode:o}"):
        _noop(f"{path} exists with mode {mode:o}")
        return
    yield _cmd("install", "-d", "-m", f"{mode:o}", path)


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
def dkms_install(dkms_name: str, version: str, kernel: str, module: str, fingerprint: str | None) -> Any:
    """Build, sign and install a DKMS module for `kernel` (the target, not the running one)."""
    current = host.get_fact(DkmsState, dkms_name=dkms_name, version=version, kernel=kernel, module=module)
    mok = host.get_fact(MokState) if fingerprint is not None and current["installed"] else None
    # a MOK imported by this run's earlier step is pending until the reboot: it counts
    certificates = [*mok["certificates"], *mok["pending_certificates"]] if mok else []
    yield from _carry_out(decide_dkms_install(dkms_name, version, kernel, current, certificates, fingerprint))


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


@operation()
def swap_retire(path: str) -> Any:
    """A swap file another baseline used: off, out of /etc/fstab, deleted."""
    info = host.get_fact(SwapFile, path=path)
    lines = host.get_fact(FindInFile, path="/etc/fstab", pattern=f"^{path} ") or []
    if info is None and not lines:
        _noop(f"no swap file {path}")
        return
    if path in host.get_fact(ActiveSwaps):
        yield _cmd("swapoff", path)
    if lines:
        escaped = path.replace("/", "\\/").replace(".", "\\.")
        yield _cmd("sed", "-i", f"/^{escaped} /d", "/etc/fstab")
    if info is not None:
        yield _cmd("rm", "-f", path)


@operation()
def swap_file(path: str, size_gib: int, header_page_size: int) -> Any:
    """The swap file exists at its size, mode 0600, with a header for `header_page_size`."""
    info = host.get_fact(SwapFile, path=path)
    size = size_gib * 1024**3
    if info is not None and info["size"] == size and info["header_page_size"] == header_page_size:
        if info["mode"] == 0o600:
            _noop(f"{path} is {size_gib} GiB with a {header_page_size}-byte header")
            return
        yield _cmd("chmod", "600", path)
        return
    if info is not None and path in host.get_fact(ActiveSwaps):
        yield _cmd("swapoff", path)
    if info is not None and info["size"] != size:
        yield _cmd("rm", "-f", path)
    yield _cmd("fallocate", "-l", f"{size_gib}G", path)
    yield _cmd("chmod", "600", path)
    yield _cmd("mkswap", "-p", str(header_page_size), path)


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
def unit_enabled(unit: str) -> Any:
    """The unit is enabled and running (`enable --now`)."""
    current = host.get_fact(UnitState, unit=unit)
    if current.unit_file_state == "enabled" and current.active_state == "active":
        _noop(f"{unit} is enabled and active")
        return
    yield _cmd("systemctl", "enable", "--now", unit)


# --- retiring what other baselines left -------------------------------------------------
# Each decision is a pure function of the facts (commands as argv lists, or the reason
# nothing is done), so the cases are tested with no host (tests/unit/retire_cases/).


class Decision(NamedTuple):
    """What a retire operation does: commands (argv lists), or why it does nothing."""

    commands: list[list[str]]
    reason: str = ""


def decide_packages_retire(names: list[str], installed: dict[str, list[str]], held: list[str],
                           running: str, target_kernel: str | None) -> Decision:
    """Unhold and purge those of `names` that are installed; kernel packages (`target_kernel`
    set) only while the node runs the target kernel, then regenerate GRUB's menu."""
    todo = [name for name in names if installed.get(name)]
    if not todo:
        return Decision([], f"none of {', '.join(names)} is installed")
    if target_kernel is not None and running != target_kernel:
        return Decision([], f"{DEFERRED}running {running or '?'}: {', '.join(todo)} are purged once "
                            f"{target_kernel} runs (after the reboot)")
    commands = []
    unhold = [name for name in todo if name in held]
    if unhold:
        commands.append(["apt-mark", "unhold", *unhold])
    commands.append(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "-q", *todo])
    if target_kernel is not None:
        commands.append(["update-grub"])
    return Decision(commands)


def decide_dkms_retire(dkms_name: str, version: str, builds: list[str]) -> Decision:
    """`dkms remove NAME/VER --all` while DKMS knows the module at all."""
    if not builds:
        return Decision([], f"DKMS has no {dkms_name}/{version}")
    return Decision([["dkms", "remove", f"{dkms_name}/{version}", "--all"]])


def decide_mok_dir_retire(path: str, certificate: str, fingerprints: list[str],
                          found: dict[str, Any] | None) -> Decision:
    """Remove the key directory when its certificate is missing or one a baseline pins (the
    pair sparkbase uploaded); a key pair someone else made is left alone, saying so."""
    if found is None:
        return Decision([], f"no MOK key directory {path}")
    seen = found["fingerprint"]
    if seen is not None and fingerprints and seen not in fingerprints:
        return Decision([], f"{KEPT}{certificate} is key {seen[:11]}…, which no baseline pins: "
                            "not sparkbase's, left alone")
    return Decision([["rm", "-rf", "--", path]])


def decide_mok_kept(fingerprints: list[str], enrolled: list[str]) -> Decision:
    """Never a change: say which MOK keys of other baselines stay enrolled in firmware."""
    kept = [key for key in fingerprints if key in enrolled]
    if not kept:
        return Decision([], "no MOK key of another baseline is enrolled")
    keys = ", ".join(f"{key[:11]}…" for key in kept)
    return Decision([], f"{KEPT}MOK {keys} stays enrolled in firmware (harmless; `mokutil --delete` "
                        "at the console removes it)")


def _carry_out(decision: Decision) -> Any:
    """Yield the decision's commands, or record its no-op reason."""
    if not decision.commands:
        _noop(decision.reason)
    for argv in decision.commands:
        yield _cmd(*argv)


@operation()
def packages_retire(names: list[str], target_kernel: str | None) -> Any:
    """Unhold and purge packages only other baselines pin (see `decide_packages_retire`)."""
    installed = host.get_fact(DebPackages) or {}
    held: list[str] = host.get_fact(HeldPackages)
    running = host.get_fact(BootState)["kernel"] if target_kernel is not None else ""
    yield from _carry_out(decide_packages_retire(names, installed, held, running, target_kernel))


@operation()
def dkms_retire(dkms_name: str, version: str) -> Any:
    """Remove another baseline's memory-saver module from DKMS, for every kernel."""
    builds = host.get_fact(DkmsBuilds, dkms_name=dkms_name, version=version)
    yield from _carry_out(decide_dkms_retire(dkms_name, version, builds))


@operation()
def mok_dir_retire(path: str, certificate: str, fingerprints: list[str]) -> Any:
    """Remove the MOK key directory sparkbase uploaded for another baseline."""
    found = host.get_fact(MokKeyDir, path=path, certificate=certificate)
    yield from _carry_out(decide_mok_dir_retire(path, certificate, fingerprints, found))


@operation()
def mok_kept(fingerprints: list[str]) -> Any:
    """Report MOK keys other baselines enrolled: firmware state, kept, never removed."""
    enrolled: list[str] = host.get_fact(MokState)["enrolled"]
    yield from _carry_out(decide_mok_kept(fingerprints, enrolled))
