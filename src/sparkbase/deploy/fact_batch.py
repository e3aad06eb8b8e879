"""Many facts in one round trip: `FactBatch` runs each fact's own command, fenced, and hands
each fact's stdout lines to that fact's own `process`, as pyinfra's `get_fact` would.

pyinfra 3.10 runs every `host.get_fact` as its own SSH round trip (`sh -c COMMAND`, stdout
read line by line). A batch runs the same commands in one `sh -c` script instead, each in a
subshell (`( eval COMMAND )`: nothing it sets or changes, `cd` included, leaks to the next;
a syntax error stays in it), stdin closed and stderr discarded (pyinfra never hands stderr to
`process`), and the environment untouched (no `LC_ALL`: each command sees what it would
alone). Each section is fenced by a nonce marker with its exit status (`facts.script`'s
format, read back by its `split_sections`), so no output can forge a boundary.

What a section gives, by pyinfra's `_get_fact` rules:
- exit status 0 and stdout lines -> `process(lines)`; status 0 and no lines -> `default()`;
- anything else is *not answered*: a non-zero status, a missing section (the script was
  cut short), a missing `requires_command` binary, or `process` raising (a
  `FactProcessError` or any other exception). A fact not answered is fetched by its own
  round trip when it is asked (`fact_memo.fact`), so pyinfra itself then fails the host,
  logs, or answers `default()` exactly as it always did. The batch only ever serves the
  answers pyinfra would have processed the same way.

Safe against the node (each a typed `NodeFailure` in `BatchAnswer.failure`, which the memo
raises as `FactReadFailed`, so the node is reported failed with the reason and the others
go on):
- the fence marker is sent on the command's stdin (pyinfra's `_stdin`), never on the
  `sh -c` command line every node process can read; a fact whose own command is fenced
  (`fence_on_stdin`: `deploy/facts.py`) reads a marker derived from it on its stdin;
  a section printed twice or one the batch never prints refuses the answer;
- the answer is capped on the node (`head -c`, `MAX_BATCH_BYTES`) and sent base64-encoded,
  so a tool printing without end costs a few MiB and names the fact it was in, and a byte
  that is not UTF-8 (which paramiko's line reader would raise on, mid-read) reaches
  `process` escaped (`\\xff`);
- time is bounded by pyinfra's `_timeout` (the inventory's `ssh.command_timeout`, fed as
  host data by `transport.feeds`): no answer in time is a failure of the node.

Facts that change how pyinfra runs them (`check_preconditions`, `shell_executable`) are
never batched. Lines are split as pyinfra's SSH connector splits them (paramiko: on `\\n`
only, a `\\r` kept; a final line without a newline kept; empty lines kept).
"""

from __future__ import annotations

import base64
import binascii
import shlex
from collections.abc import Collection, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.facts import FactBase

from sparkbase.facts.script import Section, SectionError, read_marker, split_sections, unfinished_section
from sparkbase.transport.failure import FailureKind, NodeFailure, TransportError, failure

#: the largest batch script sent in one round trip (one `sh -c` argument: Linux caps a
#: single argument at 128 KiB; the rest is headroom for sudo and the login shell)
MAX_SCRIPT_BYTES = 64 * 1024
#: the most one batch's answer may hold (its sections together) before the node fails: most
#: of a node's read is pyinfra's `dpkg -l` of every package, well under 1 MiB for a few
#: thousand packages
MAX_BATCH_BYTES = 4 * 1024 * 1024
#: the shell functions that print a section's fences (distinct names: a fact's command may
#: use `b`, `e` or `M` itself), after the marker is read from stdin
PRELUDE = (
    read_marker("_sparkbase_m"),
    "_sparkbase_b() { printf '%s BEGIN %s\\n' \"$_sparkbase_m\" \"$1\"; }",
    "_sparkbase_e() { printf '\\n%s END %s %s\\n' \"$_sparkbase_m\" \"$1\" \"$2\"; }",
)


class FactReadFailed(TransportError):
    """A node's facts could not be read safely (no answer in time, output without end, a
    forged section): the node fails with this reason."""


@dataclass(frozen=True)
class Ask:
    """One fact a host will be asked: its class and keyword arguments (as the caller passes
    them: the memo matches asks by exactly these)."""

    cls: type[FactBase[Any]]
    kwargs: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, fact: type[FactBase[Any]], **kwargs: Any) -> Ask:
        """The ask `fact(**kwargs)`."""
        return cls(fact, tuple(sorted(kwargs.items())))

    def key(self) -> tuple[type[FactBase[Any]], Hashable]:
        """What the memo files this ask under (the fact class and its arguments' repr: a list
        and a tuple of the same items are different asks, as they are to the caller)."""
        return self.cls, repr(self.kwargs)

    def batchable(self) -> bool:
        """Whether pyinfra runs this fact as a plain command (no preconditions, no own shell)."""
        return (
            issubclass(self.cls, FactBase)
            and self.cls.check_preconditions is FactBase.check_preconditions
            and self.cls.shell_executable is None
        )


@dataclass
class _Planned:
    """One ask in a batch: the fact instance pyinfra would make (its `command` may keep state
    its `process` reads), the shell text of its section, and whether its command reads a
    fence marker of its own from stdin."""

    ask: Ask
    fact: FactBase[Any]
    shell: str
    fenced: bool = False


def _command_text(command: str | StringCommand) -> str:
    return command.get_raw_value() if isinstance(command, StringCommand) else str(command)


def plan_ask(ask: Ask) -> _Planned:
    """The fact instance for `ask` and its section's command (the fact's own command; with
    `requires_command`, exit 127 when that binary is missing: not answered)."""
    fact = ask.cls()
    kwargs = dict(ask.kwargs)
    command = _command_text(fact.command(**kwargs))
    required = fact.requires_command(**kwargs)
    body = f"eval {shlex.quote(command)}"
    if required:
        body = f"command -v {shlex.quote(_command_text(required))} >/dev/null 2>&1 || exit 127; {body}"
    return _Planned(ask, fact, body, bool(getattr(fact, "fence_on_stdin", False)))


#: what a section's subshell drops first: the command sees no trace of the batch (not even
#: the marker, so not even a fact's own command can print a fence)
FORGET = "unset _sparkbase_m; unset -f _sparkbase_b _sparkbase_e"


def inner_marker(marker: str, index: int) -> str:
    """The marker a `fence_on_stdin` fact of section `index` reads on its stdin."""
    return f"{marker}-{index}"


def section_line(index: int, shell: str, fenced: bool = False) -> str:
    """One section of the script: fences around the command in a subshell (stdin closed;
    for a `fenced` fact, its own marker on stdin, derived from the batch's)."""
    end = f"2>/dev/null; _sparkbase_e {index} $?"
    if fenced:
        feed = f"printf '%s-%s\\n' \"$_sparkbase_m\" {index}"
        return f"_sparkbase_b {index}; {feed} | ( {FORGET}; {shell} ) {end}"
    return f"_sparkbase_b {index}; ( {FORGET}; {shell} ) </dev/null {end}"


def script(shells: Sequence[str], fenced: Collection[int] = ()) -> str:
    """The batch script: the marker read from stdin, the fence functions, then one fenced
    section per command."""
    lines = [*PRELUDE]
    lines += [section_line(index, shell, index in fenced) for index, shell in enumerate(shells)]
    return "\n".join(lines) + "\n"


def bounded(text: str, limit: int = MAX_BATCH_BYTES) -> str:
    """The batch command: the script with its answer cut on the node after `limit` bytes
    (one byte more shows the cut) and sent base64-encoded."""
    return f"( {text}) 2>/dev/null | head -c {limit + 1} | base64"


def stdout_lines(text: str) -> list[str]:
    """`text` split into lines as pyinfra's SSH connector reads a command's stdout."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


class NotAnswered(Exception):
    """A fact the batch cannot answer as pyinfra would: it is fetched on its own."""


def answer(fact: FactBase[Any], section: Section | None) -> Any:
    """The fact's value from its section, by pyinfra's rules; `NotAnswered` otherwise (a
    forged section inside a fenced fact's own answer raises `SectionError`)."""
    if section is None:
        raise NotAnswered("no section (the batch was cut short)")
    if section.status != 0:
        raise NotAnswered(f"exit status {section.status}")
    lines = stdout_lines(section.output)
    if not lines:
        return fact.default()
    try:
        return fact.process(lines)
    except SectionError:
        raise
    except Exception as exc:  # pyinfra's own round trip raises or fails the host the same way
        raise NotAnswered(f"process raised {type(exc).__name__}") from exc


@dataclass
class BatchAnswer:
    """What a batch answered: values by ask key, and the asks it could not answer (why); or
    why the whole answer was refused (`failure`: the node must fail)."""

    values: dict[Hashable, Any] = field(default_factory=dict)
    unanswered: dict[Hashable, str] = field(default_factory=dict)
    failure: NodeFailure | None = None


#: a batch that printed nothing or did not finish (pyinfra answers `default()` for both)
NO_ANSWER = failure(FailureKind.COMMAND, "the fact batch did not answer (it failed or the connection did)")


def decode(lines: Sequence[str], limit: int = MAX_BATCH_BYTES) -> tuple[str, bool] | NodeFailure:
    """The batch's base64 answer as text (bytes that are not UTF-8 escaped, `\\xff`) and
    whether it was cut at `limit` bytes; a failure when it is not base64."""
    try:
        data = base64.b64decode("".join(lines), validate=True)
    except (binascii.Error, ValueError) as exc:
        return failure(FailureKind.COMMAND, f"the fact batch's answer is not base64: {exc}")
    return data[:limit].decode("utf-8", errors="backslashreplace"), len(data) > limit


def read_answer(lines: Sequence[str], marker: str, planned: Sequence[_Planned],
                limit: int = MAX_BATCH_BYTES) -> BatchAnswer:
    """Every planned fact's value from the batch's output lines (pure)."""
    decoded = decode(lines, limit)
    if isinstance(decoded, NodeFailure):
        return BatchAnswer(failure=decoded)
    text, cut = decoded
    if cut:
        name = unfinished_section(text, marker)
        where = _describe(planned[int(name)].ask) if name is not None and name.isdigit() and \
            int(name) < len(planned) else "the fact batch"
        return BatchAnswer(failure=failure(FailureKind.COMMAND, f"fact output over {limit} bytes "
                                                                f"(in {where}: it printed without end?)"))
    try:
        sections = split_sections(text, marker, expected={str(i) for i in range(len(planned))})
    except SectionError as exc:
        return BatchAnswer(failure=failure(FailureKind.COMMAND, f"the fact batch's answer was forged: {exc}"))
    found = BatchAnswer()
    for index, item in enumerate(planned):
        key = item.ask.key()
        if item.fenced:
            item.fact.marker = inner_marker(marker, index)  # type: ignore[attr-defined]
        try:
            found.values[key] = answer(item.fact, sections.get(str(index)))
        except NotAnswered as exc:
            found.unanswered[key] = str(exc)
        except SectionError as exc:
            problem = f"the answer of {_describe(item.ask)} was forged: {exc}"
            return BatchAnswer(failure=failure(FailureKind.COMMAND, problem))
    return found


def _describe(ask: Ask) -> str:
    args = ", ".join(f"{key}={value!r}" for key, value in ask.kwargs)
    return f"{ask.cls.__name__}({args})"


class FactBatch(FactBase[BatchAnswer]):
    """Several facts' commands in one round trip; answers each as its own `get_fact` would.

    `fence` is the batch's marker: it is never in the command (send `marker_stdin(fence)`
    as pyinfra's `_stdin`); `limit` caps the answer."""

    def command(self, asks: Sequence[Ask], fence: str, limit: int = MAX_BATCH_BYTES) -> str:
        self.marker = fence
        self.limit = limit
        self.planned = [plan_ask(ask) for ask in asks]
        fenced = {index for index, item in enumerate(self.planned) if item.fenced}
        return bounded(script([item.shell for item in self.planned], fenced), limit)

    # pyinfra declares `default` static but always calls it on an instance (`cls().default()`)
    def default(self) -> BatchAnswer:  # type: ignore[override]
        return BatchAnswer(failure=NO_ANSWER)

    def process(self, output: list[str]) -> BatchAnswer:
        return read_answer(output, self.marker, self.planned, self.limit)


def chunks(asks: Sequence[Ask], limit: int = MAX_SCRIPT_BYTES) -> Iterator[list[Ask]]:
    """`asks` in batches whose scripts stay under `limit` bytes (an ask too large alone
    gets a batch of its own)."""
    empty = len(bounded(script([])).encode())
    batch: list[Ask] = []
    size = empty
    for ask in asks:
        planned = plan_ask(ask)
        grows = len(section_line(len(batch), planned.shell, planned.fenced).encode()) + 1
        if batch and size + grows > limit:
            yield batch
            batch, size = [], empty
            grows = len(section_line(0, planned.shell, planned.fenced).encode()) + 1
        batch.append(ask)
        size += grows
    if batch:
        yield batch
