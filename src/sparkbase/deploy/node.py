"""The node as plan and apply see it: one `NodeFacts`, read by the audit's fact script in
one round trip over pyinfra's connection, set once per host before its operations are added.

`read_node` runs the fact script of a `FactPlan` (`deploy/reads.py` makes it from the
steps) as one pyinfra command, like any fact (the inventory's sudo, the command timeout
`ssh.command_timeout`), with these guarantees:
- the fence marker is sent on the command's stdin (pyinfra's `_stdin`), never on the
  `sh -c` command line every process on the node can read;
- the answer is capped on the node (`head -c`, `MAX_ANSWER_BYTES`, stdout and stderr each)
  and sent base64-encoded: a tool printing without end costs a few MiB and names the
  section it was in; a byte that is not UTF-8 (which paramiko's line reader would raise on)
  reaches the parsers escaped (`\\xff`);
- a section printed twice or one the script never prints refuses the answer
  (`collect.read_answer`); no answer in time, output without end, a refused answer: the
  node fails with that reason (`FactReadFailed`), the others go on.

Operations read the node with `node_facts()`: the facts the session (or the native deploy)
set for the host in context with `use_facts`, read before anything executed, so while the
operations are added no answer can go stale. pyinfra runs an operation's body again when it
executes it: once an operation of the host has changed something, the next body to read the
node reads it again (the same plan, one round trip), so each decides on the node as it is
then, as pyinfra's own facts would; the initramfs' copy is not unpacked again. The ownership
record is read live whenever an executing operation writes it (`owned_record`).
"""

from __future__ import annotations

import base64
import binascii
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from weakref import WeakKeyDictionary

from pyinfra.api.facts import FactBase
from pyinfra.context import ctx_host, host, state

from sparkbase.facts.areas import build_script
from sparkbase.facts.collect import read_answer
from sparkbase.facts.model import NodeFacts, Unreachable
from sparkbase.facts.script import FactPlan, marker_stdin, new_marker, unfinished_section
from sparkbase.model.ownership import OwnershipRecord, RecordUnreadable
from sparkbase.transport.failure import FailureKind, NodeFailure, TransportError

#: the most one answer may hold (stdout and stderr each) before the node fails: most of it
#: is the netplan listing and the files read, well under 1 MiB
MAX_ANSWER_BYTES = 4 * 1024 * 1024
#: the line between the base64 of the script's stdout and that of its stderr
STDERR_FOLLOWS = "__sparkbase_stderr__"


class FactReadFailed(TransportError):
    """A node's facts could not be read safely (no answer in time, output without end, a
    forged section): the node fails with this reason."""


def bounded(script: str, limit: int = MAX_ANSWER_BYTES) -> str:
    """The command: `script` with its stdout, then (after `STDERR_FOLLOWS`) its stderr, each
    cut on the node after `limit` bytes (one more shows the cut) and sent base64-encoded.
    The script reads the marker from stdin; nothing it runs can write around the encoding."""
    cap = f"head -c {limit + 1} | base64"
    return (f"( e=$( {{ ( {script}\n) 3>&- | {cap} >&3; }} 2>&1 | {cap} ); "
            f'echo {STDERR_FOLLOWS}; printf "%s\\n" "$e" ) 3>&1')


class FactScript(FactBase[list[str]]):
    """The fact script as one pyinfra fact: its answer's lines, undecoded (`decode_answer`)."""

    def command(self, script: str) -> str:
        return bounded(script)

    # pyinfra declares `default` static but always calls it on an instance (`cls().default()`)
    def default(self) -> list[str]:  # type: ignore[override]
        return []

    def process(self, output: list[str]) -> list[str]:
        return output


def decode_answer(lines: Sequence[str], limit: int = MAX_ANSWER_BYTES) -> tuple[str, str, bool] | NodeFailure:
    """The answer's stdout and stderr as text (bytes that are not UTF-8 escaped, `\\xff`), and
    whether either was cut at `limit` bytes; a failure when it is not what `bounded` prints."""
    if STDERR_FOLLOWS not in lines:
        return NodeFailure(FailureKind.COMMAND,
                           "the fact script did not answer (it or the connection failed)")
    split = list(lines).index(STDERR_FOLLOWS)
    try:
        out = base64.b64decode("".join(lines[:split]), validate=True)
        err = base64.b64decode("".join(lines[split + 1:]), validate=True)
    except (binascii.Error, ValueError) as exc:
        return NodeFailure(FailureKind.COMMAND, f"the fact script's answer is not base64: {exc}")
    cut = len(out) > limit or len(err) > limit
    text = out[:limit].decode("utf-8", errors="backslashreplace")
    return text, err[:limit].decode("utf-8", errors="backslashreplace"), cut


def _timeout() -> int | None:
    data = getattr(host, "data", None)
    given = getattr(data, "sparkbase_command_timeout", None) or getattr(data, "_timeout", None)
    return math.ceil(float(given)) if given is not None else None  # pyinfra takes whole seconds


def read_node(plan: FactPlan, limit: int = MAX_ANSWER_BYTES) -> NodeFacts:
    """The current host's facts by `plan`, in one bounded round trip; `FactReadFailed` when
    the answer is refused or none came in time."""
    marker = new_marker()
    timeout = _timeout()
    started = time.monotonic()
    lines = host.get_fact(FactScript, script=build_script(plan), _stdin=marker_stdin(marker),
                          _ignore_errors=True, **({"_timeout": timeout} if timeout is not None else {}))
    decoded = decode_answer(lines, limit)
    if isinstance(decoded, NodeFailure):
        if timeout is not None and time.monotonic() - started >= timeout - 0.5:
            decoded = NodeFailure(FailureKind.TIMEOUT, f"no answer to a fact read within {timeout}s "
                                                       "(ssh.command_timeout)")
        raise FactReadFailed(decoded)
    stdout, stderr, cut = decoded
    if cut:
        where = unfinished_section(stdout, marker)
        said = f" (in section {where!r}: it printed without end?)" if where else ""
        raise FactReadFailed(NodeFailure(FailureKind.COMMAND, f"fact output over {limit} bytes{said}"))
    found = read_answer(str(host.name), plan, stdout, stderr, marker, time.monotonic() - started)
    if isinstance(found, Unreachable):
        raise FactReadFailed(NodeFailure(found.kind, found.reason))
    return found


@dataclass
class _Read:
    """A host's facts, the plan they were read by, and how many of its operations had
    executed a change when they were read."""

    facts: NodeFacts
    plan: FactPlan | None
    changes: int = 0


_READS: WeakKeyDictionary[Any, _Read] = WeakKeyDictionary()


def use_facts(facts: NodeFacts, plan: FactPlan | None = None) -> None:
    """What the current host's operations read from now on (`node_facts`); with `plan` (what
    `facts` were read by), read again once an executed operation changed the node."""
    _READS[ctx_host.get()] = _Read(facts, plan)  # type: ignore[no-untyped-call]


def _changes_executed() -> int:
    """How many operations of the current host executed and changed something."""
    current = ctx_host.get()  # type: ignore[no-untyped-call]
    count = 0
    for op_hash in current.op_hash_order:
        meta = state.get_op_data_for_host(current, op_hash).operation_meta
        count += bool(meta.is_complete() and meta.did_change())
    return count


def node_facts() -> NodeFacts:
    """The current host's facts (`use_facts`): the node before anything executed, or while
    executing, as it is after the operations that ran before."""
    read = _READS[ctx_host.get()]  # type: ignore[no-untyped-call]
    if state.is_executing and read.plan is not None:
        changes = _changes_executed()
        if changes != read.changes:
            fresh = read_node(replace(read.plan, initramfs=()))
            read.facts, read.changes = replace(fresh, initramfs=read.facts.initramfs), changes
    return read.facts


def owned_record() -> OwnershipRecord:
    """The node's ownership record: as read with its facts while operations are added; read
    live once they execute (an earlier operation may have written it). `RecordUnreadable`
    when the record cannot be used."""
    facts = read_node(FactPlan(core_only=True, ownership=True)) if state.is_executing else node_facts()
    if facts.ownership is None:
        raise RecordUnreadable(facts.ownership_problem or "the ownership record was not read")
    return facts.ownership


def boot_state(facts: NodeFacts) -> dict[str, Any]:
    """What the node booted, as the reboot reasons read it: kernel, page size, command line,
    THP, modules, nvidia-drm parameters; and what an earlier apply staged for the next boot."""
    params = facts.module_params
    return {
        "kernel": facts.kernel_release or "",
        "page_size": facts.page_size or 0,
        "cmdline": list(facts.cmdline),
        "thp": facts.thp or "",
        "modules": sorted(facts.modules),
        "drm_modeset": params.get("nvidia_drm.modeset") or "",
        "drm_fbdev": params.get("nvidia_drm.fbdev") or "",
        "staged": list(facts.staged),
    }


def mok_state(facts: NodeFacts) -> dict[str, Any]:
    """Secure Boot state, and the enrolled and pending MOK certificates (and fingerprints)."""
    return {
        "secure_boot": facts.secure_boot,
        "certificates": list(facts.mok_certificates),
        "pending_certificates": list(facts.mok_pending),
        "enrolled": [cert.fingerprint for cert in facts.mok_certificates],
        "pending": [cert.fingerprint for cert in facts.mok_pending],
    }


def active_swaps() -> list[str]:
    """Paths of the node's active swap areas."""
    return sorted(entry.name for entry in node_facts().swaps)
