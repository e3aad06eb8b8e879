"""Gather facts over SSH: one round trip per node, nodes in parallel, host keys checked.

Each node gets one `exec` of the fact script on sparkbase's strict SSH client
(`transport.client`: known_hosts only, connect and command deadlines, an output cap, sudo),
its fence marker sent on the channel's stdin (never on a command line). Whatever goes
wrong with one node (refused, timed out, wrong key or login, script cut short or answering
nonsense) becomes `Unreachable(reason, kind)` for that node; the others carry on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from sparkbase.facts.areas import build_script
from sparkbase.facts.areas import sections as script_sections
from sparkbase.facts.assemble import assemble
from sparkbase.facts.model import FactsResult, Unreachable
from sparkbase.facts.script import (
    FactPlan,
    SectionError,
    marker_stdin,
    new_marker,
    split_sections,
    unfinished_section,
)
from sparkbase.transport.client import connect, run_command
from sparkbase.transport.failure import CommandFailed, FailureKind, TransportError

if TYPE_CHECKING:
    from sparkbase.transport import SshTarget

DEFAULT_PARALLEL = 16


def gather_node(node: str, target: SshTarget, plan: FactPlan) -> FactsResult:
    """Facts of one node in one round trip, or why it could not be asked."""
    start = time.monotonic()
    marker = new_marker()
    try:
        client = connect(target)
    except TransportError as exc:  # one node's failure must not stop the others
        return Unreachable(node, exc.failure.message, exc.failure.kind)
    try:
        answer = run_command(client, build_script(plan), target.command_timeout, target.sudo,
                             stdin=marker_stdin(marker))
    except CommandFailed as exc:
        where = unfinished_section(exc.partial, marker)
        said = f" (in section {where!r})" if where else ""
        return Unreachable(node, f"fact script failed: {exc.failure.message}{said}", exc.failure.kind)
    except TransportError as exc:
        return Unreachable(node, f"fact script failed: {exc.failure.message}", exc.failure.kind)
    finally:
        client.close()
    return read_answer(node, plan, answer.stdout, answer.stderr, marker, time.monotonic() - start)


def read_answer(node: str, plan: FactPlan, stdout: str, stderr: str, marker: str,
                elapsed: float = 0.0) -> FactsResult:
    """The node's facts from its fact script's answer (pure): `Unreachable` when sections
    were forged (printed twice, or one the script never prints), none came, or the answer
    was cut short."""
    wanted = [name for name, _ in script_sections(plan)]
    try:
        sections = split_sections(stdout, marker, stderr, expected=frozenset(wanted))
    except SectionError as exc:
        return Unreachable(node, f"the fact script's answer was forged: {exc}", FailureKind.COMMAND)
    if not sections.by_name:
        return Unreachable(node, "the node answered, but not with the fact script's sections",
                           FailureKind.COMMAND)
    if wanted and wanted[-1] not in sections.by_name:
        return Unreachable(node, f"the fact script's answer was cut short ({len(sections.by_name)} of "
                                 f"{len(wanted)} sections)", FailureKind.COMMAND)
    return assemble(node, plan, sections, elapsed=elapsed)


def gather_fleet(
    targets: Mapping[str, SshTarget],
    plans: Mapping[str, FactPlan],
    parallel: int = DEFAULT_PARALLEL,
    gather: Callable[[str, SshTarget, FactPlan], FactsResult] = gather_node,
) -> dict[str, FactsResult]:
    """Facts of every planned node, gathered concurrently (at most `parallel` at once)."""
    nodes = list(plans)
    if not nodes:
        return {}
    workers = max(1, min(parallel, len(nodes)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="facts") as pool:
        futures = {node: pool.submit(gather, node, targets[node], plans[node]) for node in nodes}
        return {node: future.result() for node, future in futures.items()}
