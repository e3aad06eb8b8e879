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

Facts that change how pyinfra runs them (`check_preconditions`, `shell_executable`) are
never batched. Lines are split as pyinfra's SSH connector splits them (paramiko: on `\\n`
only, a `\\r` kept; a final line without a newline kept; empty lines kept).
"""

from __future__ import annotations

import shlex
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.facts import FactBase

from sparkbase.facts.script import Section, new_marker, split_sections

#: the largest batch script sent in one round trip (one `sh -c` argument: Linux caps a
#: single argument at 128 KiB; the rest is headroom for sudo and the login shell)
MAX_SCRIPT_BYTES = 64 * 1024
#: the shell functions that print a section's fences (distinct names: a fact's command may
#: use `b`, `e` or `M` itself)
PRELUDE = (
    "_sparkbase_b() { printf '%s BEGIN %s\\n' \"$_sparkbase_m\" \"$1\"; }",
    "_sparkbase_e() { printf '\\n%s END %s %s\\n' \"$_sparkbase_m\" \"$1\" \"$2\"; }",
)


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
    its `process` reads) and the shell text of its section."""

    ask: Ask
    fact: FactBase[Any]
    shell: str


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
    return _Planned(ask, fact, body)


#: what a section's subshell drops first: the command sees no trace of the batch (not even
#: the marker, so not even a fact's own command can print a fence)
FORGET = "unset _sparkbase_m; unset -f _sparkbase_b _sparkbase_e"


def section_line(index: int, shell: str) -> str:
    """One section of the script: fences around the command in a subshell."""
    return f"_sparkbase_b {index}; ( {FORGET}; {shell} ) </dev/null 2>/dev/null; _sparkbase_e {index} $?"


def script(marker: str, shells: Sequence[str]) -> str:
    """The batch script: the fence functions, then one fenced section per command."""
    lines = [f"_sparkbase_m={shlex.quote(marker)}", *PRELUDE]
    lines += [section_line(index, shell) for index, shell in enumerate(shells)]
    return "\n".join(lines) + "\n"


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
    """The fact's value from its section, by pyinfra's rules; `NotAnswered` otherwise."""
    if section is None:
        raise NotAnswered("no section (the batch was cut short)")
    if section.status != 0:
        raise NotAnswered(f"exit status {section.status}")
    lines = stdout_lines(section.output)
    if not lines:
        return fact.default()
    try:
        return fact.process(lines)
    except Exception as exc:  # pyinfra's own round trip raises or fails the host the same way
        raise NotAnswered(f"process raised {type(exc).__name__}") from exc


@dataclass
class BatchAnswer:
    """What a batch answered: values by ask key, and the asks it could not answer (why)."""

    values: dict[Hashable, Any] = field(default_factory=dict)
    unanswered: dict[Hashable, str] = field(default_factory=dict)


class FactBatch(FactBase[BatchAnswer]):
    """Several facts' commands in one round trip; answers each as its own `get_fact` would."""

    def command(self, asks: Sequence[Ask]) -> str:
        self.marker = new_marker()
        self.planned = [plan_ask(ask) for ask in asks]
        return script(self.marker, [planned.shell for planned in self.planned])

    @staticmethod
    def default() -> BatchAnswer:
        return BatchAnswer()

    def process(self, output: list[str]) -> BatchAnswer:
        sections = split_sections("\n".join(output) + "\n", self.marker)
        found = BatchAnswer()
        for index, planned in enumerate(self.planned):
            key = planned.ask.key()
            try:
                found.values[key] = answer(planned.fact, sections.get(str(index)))
            except NotAnswered as exc:
                found.unanswered[key] = str(exc)
        return found


def chunks(asks: Sequence[Ask], limit: int = MAX_SCRIPT_BYTES) -> Iterator[list[Ask]]:
    """`asks` in batches whose scripts stay under `limit` bytes (an ask too large alone
    gets a batch of its own)."""
    empty = len(script(new_marker(), []).encode())
    batch: list[Ask] = []
    size = empty
    for ask in asks:
        grows = len(section_line(len(batch), plan_ask(ask).shell).encode()) + 1
        if batch and size + grows > limit:
            yield batch
            batch, size = [], empty
            grows = len(section_line(0, plan_ask(ask).shell).encode()) + 1
        batch.append(ask)
        size += grows
    if batch:
        yield batch
