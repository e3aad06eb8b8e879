"""Fabric operations (section `fabric`), by netplan: one file configures the fabric ports
(others refused, sparkbase's own earlier edits put back), and the site's file taken over when
the baseline names it.

Both read the node's netplan files from its one read (`NodeFacts.netplan_files`) and hand
them to the pure decisions of `sparkbase.policy.netplan`; a refusal fails the node while it is
planned, before anything on it is written.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from io import BytesIO
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.api.operation import operation

from sparkbase.deploy.node import node_facts, owned_record
from sparkbase.deploy.operations.base import atomic_upload, cmd, guard, noop, refuse_unless_writable
from sparkbase.deploy.operations.record import forget, remember
from sparkbase.facts.model import NetplanListing
from sparkbase.facts.parsers.fabric import NETPLAN_SECTION, Fabric
from sparkbase.model.ownership import now_utc
from sparkbase.policy.netplan import (
    NetplanFilesDecision,
    TakeoverDecision,
    decide_netplan_files,
    decide_takeover,
    sha256_text,
)


def _put(path: str, text: str, mode: int) -> Any:
    """Write `text` to `path` with `mode` (temp file, checked, renamed; never through a link)."""
    data = text.encode()
    yield from atomic_upload(BytesIO(data), path, mode, sha256_text(text))


def carry_out_files(decision: NetplanFilesDecision) -> Any:
    """Remove sparkbase's unused fabric file, put site files back, forget them in the record."""
    for path in decision.remove:
        yield StringCommand(f"{guard(path)}; {cmd('rm', '-f', '--', path).get_raw_value()}")
    for restore in decision.restore:
        yield from _put(restore.path, restore.text, restore.mode)
    if decision.forget:
        yield from forget(decision.forget)


@operation()
def netplan_files(path: str, interfaces: Sequence[str]) -> Any:
    """Only `path` configures the fabric's `interfaces` once this apply is done: what sparkbase
    changed in other netplan files is put back (recorded, unchanged), and another file that
    configures a fabric port (or may: it does not parse) fails the node, naming both files."""
    decision = decide_netplan_files(path, list(interfaces), netplan_listing(), owned_record())
    if decision.refusal is not None:
        raise OperationError(decision.refusal)
    if not decision.changes:
        noop(decision.reason)
        return
    yield from carry_out_files(decision)


def netplan_listing() -> NetplanListing:
    """Every netplan file of the node; `OperationError` (the node fails) when they could not
    be listed: no decision is made on files it cannot see."""
    facts = node_facts()
    if facts.netplan_files is None:
        problem = facts.errors.get(NETPLAN_SECTION, "not read")
        raise OperationError(f"the node's netplan files could not be listed: {problem}")
    return facts.netplan_files


def takeover_decision(path: str, fabric: Fabric, baseline: str = "") -> TakeoverDecision:
    """What `netplan_takeover` decides from the node's facts (also used for the plan's diff)."""
    return decide_takeover(path, fabric, netplan_listing().get(path), owned_record(), baseline, now_utc())


def takeover_diff(path: str, fabric: Fabric) -> list[str]:
    """The plan's diff of the site file sparkbase would rewrite (empty: no rewrite)."""
    decision = takeover_decision(path, fabric)
    source = netplan_listing().get(path)
    if decision.text is None or source is None or source.text is None:
        return []
    return [line.rstrip("\n") for line in difflib.unified_diff(
        source.text.splitlines(keepends=True), decision.text.splitlines(keepends=True),
        fromfile=f"{path} (node)", tofile=f"{path} (fabric merged in)")]


@operation()
def netplan_takeover(path: str, fabric: Fabric, mode: int, baseline: str = "") -> Any:
    """The site's netplan file `path` configures the fabric's interfaces as `fabric` says; every
    other key of it stays as the site wrote it. The first rewrite records the file's text and
    mode as found (`edited-file`), which moving the node to a baseline without it puts back.
    The record is written before the file: a run cut short between the two leaves the site's
    text on the node and in the record, and the next run writes the file (the other order
    would lose the site's text for good)."""
    refuse_unless_writable(path, node_facts().file_states[path])
    decision = takeover_decision(path, fabric, baseline)
    if decision.refusal is not None:
        raise OperationError(decision.refusal)
    if decision.text is None:
        noop(decision.reason)
        return
    if decision.record is not None:
        yield from remember(decision.record)
    yield from _put(path, decision.text, mode)
