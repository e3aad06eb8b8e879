"""Kernel operations (section `kernel`): grub.cfg regenerated when it does not boot the
baseline's kernel as it wants, or is older than the drop-in it is generated from."""

from __future__ import annotations

from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import node_facts
from sparkbase.deploy.operations.base import changed, noop
from sparkbase.facts.model import GrubBoot
from sparkbase.facts.parsers.kernel import GRUB_CFG


def grub_stale(grub: GrubBoot, release: str, default_entry: str | None, cmdline: list[str],
               forbid: list[str], fallback: str | None = None) -> str | None:
    """Why grub.cfg does not reflect the baseline (None when it does). With `default_entry`
    (the baseline pins GRUB's default), the default must boot `release`, however GRUB names
    it (title path, entry id, index, `${saved_entry}`), as the audit judges it; with
    `fallback`, that kernel must have an entry too."""
    entry = next((e for e in grub.entries if e.release == release and not e.recovery), None)
    if entry is None:
        return f"grub.cfg has no entry for {release}"
    if fallback is not None and not any(e.release == fallback and not e.recovery for e in grub.entries):
        return f"grub.cfg has no entry for the fallback kernel {fallback}"
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


def decide_grub_update(grub: GrubBoot, release: str, default_entry: str | None, cmdline: list[str],
                       forbid: list[str], fallback: str | None, dropin_changes: bool,
                       dropin_newer: bool) -> str | None:
    """Why `update-grub` must run (None: grub.cfg reflects the baseline): the drop-in
    changes now, or was written after grub.cfg was generated (a run that died between the
    two; an argument it dropped is no missing argument `grub_stale` could see), or grub.cfg
    does not boot the baseline as it wants."""
    if dropin_changes:
        return "the GRUB drop-in changes"
    if dropin_newer:
        return "the GRUB drop-in was written after grub.cfg was generated"
    return grub_stale(grub, release, default_entry, cmdline, forbid, fallback)


@operation()
def grub_update(release: str, default_entry: str | None, cmdline: list[str], forbid: list[str],
                dropin: str, trigger: Any = None, fallback: str | None = None) -> Any:
    """`update-grub` when the drop-in changes or is newer than grub.cfg, or grub.cfg does
    not match the baseline (a fallback kernel installed by this run gets its entry so)."""
    facts = node_facts()
    grub = facts.grub or GrubBoot((), "", None)  # no grub.cfg (or none readable): no entry at all
    reason = decide_grub_update(grub, release, default_entry, cmdline, forbid, fallback,
                                changed(trigger), facts.newer[(dropin, GRUB_CFG)])
    if reason is None:
        noop(f"grub.cfg boots {release} with the baseline's arguments")
        return
    yield "update-grub"
