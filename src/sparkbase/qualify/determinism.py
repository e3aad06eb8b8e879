"""The determinism gate: each prompt's completion, hashed, against the previous release's.

A completion is what the engine returned for one prompt of the fixed set (temperature 0,
fixed seed and max tokens): its token ids where the engine returns them, else its exact
text. Its hash is the sha256 of a canonical form that says which of the two it is, so a
release that starts returning token ids is a change, not a silent match. Any change fails
the gate; `changes` says which prompts changed and where they first differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkbase.gate.records import Completion


@dataclass(frozen=True)
class Change:
    """A prompt whose completion differs from the previous release's."""

    prompt_id: str
    what: str  # "token", "character", "form", "missing" or "new"
    position: int | None  # first differing token or character (0-based)
    before: str
    after: str

    def describe(self) -> str:
        """`prompt p03: first differs at token 17 ('...' -> '...')`."""
        if self.what in ("missing", "new"):
            gone = "no completion now" if self.what == "missing" else "not in the previous release"
            return f"prompt {self.prompt_id}: {gone}"
        if self.what == "form":
            return f"prompt {self.prompt_id}: {self.before} before, {self.after} now"
        return (f"prompt {self.prompt_id}: first differs at {self.what} {self.position} "
                f"({self.before!r} -> {self.after!r})")


def _first_difference(before: Sequence[object], after: Sequence[object]) -> int:
    for index, (old, new) in enumerate(zip(before, after, strict=False)):
        if old != new:
            return index
    return min(len(before), len(after))


def _excerpt(items: Sequence[object], at: int, width: int = 12) -> str:
    part = items[at:at + width]
    if isinstance(items, str):
        return str(part)
    return " ".join(str(item) for item in part)


def change_of(before: Completion, after: Completion) -> Change | None:
    """How `after` differs from `before` (None when their hashes are equal)."""
    if before.digest() == after.digest():
        return None
    if (before.token_ids is None) != (after.token_ids is None):
        form = {True: "text only", False: "token ids"}
        return Change(after.prompt_id, "form", None,
                      form[before.token_ids is None], form[after.token_ids is None])
    if before.token_ids is not None and after.token_ids is not None:
        at = _first_difference(before.token_ids, after.token_ids)
        return Change(after.prompt_id, "token", at,
                      _excerpt(before.token_ids, at), _excerpt(after.token_ids, at))
    at = _first_difference(before.text, after.text)
    return Change(after.prompt_id, "character", at, _excerpt(before.text, at), _excerpt(after.text, at))


def changes(previous: Mapping[str, Completion], current: Mapping[str, Completion]) -> list[Change]:
    """Every prompt whose completion changed, appeared or disappeared, in prompt order."""
    found: list[Change] = []
    for prompt_id in sorted(set(previous) | set(current)):
        before, after = previous.get(prompt_id), current.get(prompt_id)
        if before is None:
            found.append(Change(prompt_id, "new", None, "", ""))
        elif after is None:
            found.append(Change(prompt_id, "missing", None, "", ""))
        else:
            change = change_of(before, after)
            if change is not None:
                found.append(change)
    return found
