"""Retire operations: remove what the site's other baselines put on a node, and only what
sparkbase recorded creating there, unchanged (`sparkbase.policy.ownership`).

Each operation reads facts, hands them to a pure `decide_*` function (commands as argv
lists, or the reason nothing is done, and the record entries to forget), then carries the
decision out; the cases are tested with no host (`tests/unit/retire_cases/`). Anything
found that sparkbase did not create, or that changed since, is kept and reported with a
`kept: ` note that plan and apply show.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import active_swaps, mok_state, node_facts, owned_record
from sparkbase.deploy.operations.base import Decision, carry_out
from sparkbase.deploy.operations.dkms import source_tree
from sparkbase.deploy.operations.packages import installed_versions
from sparkbase.deploy.operations.record import forget
from sparkbase.deploy.operations.units import unit_state
from sparkbase.deploy.results import DEFERRED, KEPT
from sparkbase.facts.model import DkmsEntry
from sparkbase.model.ownership import Entry, Kind, OwnershipRecord
from sparkbase.policy.ownership import Verdict, decide_directory, decide_identified, decide_packages

FSTAB = "/etc/fstab"


# --- decisions (pure) ---------------------------------------------------------------------------


def fstab_delete(path: str) -> list[str]:
    """The `sed` that deletes /etc/fstab lines for `path` (the path's regex characters escaped)."""
    escaped = path.replace("/", "\\/").replace(".", "\\.")
    return ["sed", "-i", f"/^{escaped} /d", FSTAB]


def decide_swap_retire(path: str, found: bool, uuid: str | None, active: bool, fstab: bool,
                       owned: OwnershipRecord) -> Decision:
    """Switch off, unlist and delete a swap file sparkbase created (its header still carries the
    UUID sparkbase wrote); a swap file someone else made, or remade, is kept with its line."""
    if not found and not fstab:
        return Decision([], f"no swap file {path}")
    verdict = decide_identified(Kind.SWAP, path, found, uuid, owned)
    if not found:
        if owned.find(Kind.SWAP, path) is None:
            return Decision([], f"{KEPT}the {FSTAB} line for {path} was not written by sparkbase: "
                                "left in place")
        return Decision([fstab_delete(path)], forget=((Kind.SWAP, path),))
    if not verdict.removable:
        return Decision([], verdict.kept_note())
    commands = [["swapoff", path]] if active else []
    if fstab:
        commands.append(fstab_delete(path))
    commands.append(["rm", "-f", "--", path])
    return Decision(commands, forget=verdict.forget)


def decide_packages_retire(names: list[str], installed: Mapping[str, Collection[str]], held: list[str],
                           running: str, target_kernel: str | None, owned: OwnershipRecord) -> Decision:
    """Unhold and purge those of `names` sparkbase installed (still at the version it installed);
    kernel packages (`target_kernel` set) only while the node runs the target kernel, then
    regenerate GRUB's menu. The rest is reported by `decide_packages_kept`."""
    todo = [d.target for d in decide_packages(names, installed, owned) if d.removable]
    if not todo:
        present = [name for name in names if installed.get(name)]
        if not present:
            return Decision([], f"none of {', '.join(names)} is installed")
        return Decision([], f"none of {', '.join(present)} was installed by sparkbase")
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
    return Decision(commands, forget=tuple((Kind.PACKAGE, name) for name in todo))


def decide_packages_kept(names: list[str], installed: Mapping[str, Collection[str]],
                         owned: OwnershipRecord) -> Decision:
    """Never a change: name the packages of other baselines that are installed but are not
    sparkbase's to purge (it did not install them, or their version changed since)."""
    decisions = decide_packages(names, installed, owned)
    kept = [d for d in decisions if d.verdict in (Verdict.NOT_OURS, Verdict.CHANGED)]
    if not kept:
        return Decision([], "no other baseline's package is installed without sparkbase having installed it")
    parts = []
    for d in kept:
        why = "not installed by sparkbase" if d.verdict is Verdict.NOT_OURS else f"changed since: {d.detail}"
        parts.append(f"{d.target} {'/'.join(sorted(installed.get(d.target) or []))} ({why})")
    return Decision([], f"{KEPT}{'; '.join(parts)}: left installed")


def decide_dkms_retire(dkms_name: str, version: str, builds: list[str], owned: OwnershipRecord) -> Decision:
    """`dkms remove NAME/VER --all` of a module sparkbase built, while DKMS knows it at all."""
    target = f"{dkms_name}/{version}"
    # the source tree sparkbase placed (`dkms_source`) goes once DKMS no longer builds from it
    tree = source_tree(dkms_name, version)
    placed = owned.find(Kind.DKMS_SOURCE, tree) is not None
    remove_tree = [["rm", "-rf", "--", tree]] if placed else []
    forget_tree = ((Kind.DKMS_SOURCE, tree),) if placed else ()
    verdict = decide_identified(Kind.DKMS, target, bool(builds), None, owned)
    if verdict.verdict is Verdict.ABSENT:
        return Decision(remove_tree, "" if placed else f"DKMS has no {target}", forget=forget_tree)
    if not verdict.removable:
        return Decision([], f"{KEPT}DKMS module {target} was not built by sparkbase: left in place")
    return Decision([["dkms", "remove", target, "--all"], *remove_tree],
                    forget=(*verdict.forget, *forget_tree))


def decide_mok_dir_retire(path: str, entries: list[Entry] | None, owned: OwnershipRecord) -> Decision:
    """Remove the MOK key directory sparkbase created, file by file, when everything in it is
    what sparkbase uploaded, unchanged (`rmdir` last: never `rm -r`); otherwise keep it."""
    verdict = decide_directory(path, entries, owned)
    if verdict.verdict is Verdict.ABSENT:
        return Decision([], f"no MOK key directory {path}")
    if not verdict.removable:
        return Decision([], verdict.kept_note())
    files = sorted(f"{path}/{entry.name}" for entry in entries or [])
    commands = [["rm", "-f", "--", *files]] if files else []
    return Decision([*commands, ["rmdir", "--", path]], forget=verdict.forget)


def decide_unit_retire(unit: str, unit_file_state: str, active_state: str,
                       owned: OwnershipRecord) -> Decision:
    """Disable and stop a unit another baseline runs, when sparkbase enabled it."""
    enabled = unit_file_state in ("enabled", "enabled-runtime", "alias")
    active = active_state == "active"
    if not unit_file_state and not active:
        return Decision([], f"{unit} is not installed")
    if not enabled and not active:
        return Decision([], f"{unit} is {unit_file_state} and inactive")
    if owned.find(Kind.UNIT, unit) is None:
        state = "enabled" if enabled else "running"
        return Decision([], f"{KEPT}{unit} was not enabled by sparkbase: left {state}")
    argv = ["systemctl", "disable", "--now", unit] if enabled else ["systemctl", "stop", unit]
    return Decision([argv], forget=((Kind.UNIT, unit),))


def decide_mok_kept(fingerprints: list[str], enrolled: list[str]) -> Decision:
    """Never a change: say which MOK keys of other baselines stay enrolled in firmware."""
    kept = [key for key in fingerprints if key in enrolled]
    if not kept:
        return Decision([], "no MOK key of another baseline is enrolled")
    keys = ", ".join(f"{key[:11]}…" for key in kept)
    return Decision([], f"{KEPT}MOK {keys} stays enrolled in firmware (harmless; `mokutil --delete` "
                        "at the console removes it)")


# --- operations ---------------------------------------------------------------------------------


def _carry_out_and_forget(decision: Decision) -> Any:
    """The decision's commands, then (once they ran) its entries dropped from the record."""
    yield from carry_out(decision)
    if decision.commands and decision.forget:
        yield from forget(decision.forget)


@operation()
def swap_retire(path: str) -> Any:
    """Another baseline's swap file, if sparkbase created it: off, out of /etc/fstab, deleted."""
    facts = node_facts()
    info = facts.swap_files[path]
    lines = fstab_lines(path)
    if info is None and not lines:
        yield from carry_out(Decision([], f"no swap file {path}"))
        return
    uuid = facts.swap_uuids[path] if info is not None else None
    active = info is not None and path in active_swaps()
    owned = owned_record()
    decision = decide_swap_retire(path, info is not None, uuid, active, bool(lines), owned)
    yield from _carry_out_and_forget(decision)


def fstab_lines(path: str) -> list[str]:
    """The /etc/fstab lines that start with `path` and a space (those `fstab_delete` deletes)."""
    text = node_facts().file_texts[FSTAB] or ""
    return [line for line in text.split("\n") if line.startswith(path + " ")]


@operation()
def packages_retire(names: list[str], target_kernel: str | None) -> Any:
    """Unhold and purge packages only other baselines pin, that sparkbase installed."""
    installed = installed_versions()
    if not any(installed.get(name) for name in names):
        yield from carry_out(Decision([], f"none of {', '.join(names)} is installed"))
        return
    held = list(node_facts().held)
    running = (node_facts().kernel_release or "") if target_kernel is not None else ""
    owned = owned_record()
    yield from _carry_out_and_forget(decide_packages_retire(names, installed, held, running, target_kernel,
                                                            owned))


@operation()
def packages_kept(names: list[str]) -> Any:
    """Report the other baselines' packages that are installed but not sparkbase's to purge."""
    installed = installed_versions()
    owned = owned_record() if any(installed.get(name) for name in names) else OwnershipRecord()
    yield from carry_out(decide_packages_kept(names, installed, owned))


def dkms_builds(entries: Iterable[DkmsEntry], dkms_name: str, version: str) -> list[str]:
    """The kernels DKMS has `dkms_name/version` built or installed for (`""` for an
    added-only tree); empty: DKMS has none."""
    return [entry.kernel or "" for entry in entries if entry.name == dkms_name and entry.version == version]


@operation()
def dkms_retire(dkms_name: str, version: str) -> Any:
    """Remove another baseline's memory-saver module from DKMS, for every kernel, if sparkbase
    built it."""
    builds = dkms_builds(node_facts().dkms, dkms_name, version)
    owned = owned_record()
    yield from _carry_out_and_forget(decide_dkms_retire(dkms_name, version, builds, owned))


@operation()
def mok_dir_retire(path: str) -> Any:
    """Remove the MOK key directory sparkbase created for another baseline, if unchanged."""
    found = node_facts().dir_entries[path]
    entries = list(found) if found is not None else None
    owned = owned_record() if entries is not None else OwnershipRecord()
    yield from _carry_out_and_forget(decide_mok_dir_retire(path, entries, owned))


@operation()
def unit_retire(unit: str) -> Any:
    """Disable and stop a unit only other baselines run, if sparkbase enabled it."""
    state = unit_state(unit)
    owned = owned_record() if state.unit_file_state or state.active_state == "active" \
        else OwnershipRecord()
    decision = decide_unit_retire(unit, state.unit_file_state, state.active_state, owned)
    yield from _carry_out_and_forget(decision)


@operation()
def mok_kept(fingerprints: list[str]) -> Any:
    """Report MOK keys other baselines enrolled: firmware state, kept, never removed."""
    enrolled: list[str] = mok_state(node_facts())["enrolled"]
    yield from carry_out(decide_mok_kept(fingerprints, enrolled))


def decide_file_retire(path: str, sha256: str | None, owned: OwnershipRecord) -> Decision:
    """Delete a file another baseline rendered (the fan module's modules-load.d entry) when
    sparkbase wrote it and it is unchanged (`sha256` None: no file)."""
    verdict = decide_identified(Kind.FILE, path, sha256 is not None, sha256, owned)
    if verdict.verdict is Verdict.ABSENT:
        return Decision([], f"no {path}")
    if not verdict.removable:
        return Decision([], verdict.kept_note())
    return Decision([["rm", "-f", "--", path]], forget=verdict.forget)


@operation()
def file_retire(path: str) -> Any:
    """Delete another baseline's rendered file, if sparkbase wrote it and it is unchanged."""
    info = node_facts().file_states[path]
    owned = owned_record() if info is not None else OwnershipRecord()
    sha256 = info.sha256 if info is not None else None
    yield from _carry_out_and_forget(decide_file_retire(path, sha256, owned))
