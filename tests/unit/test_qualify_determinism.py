"""The determinism gate's hashes and the changes it names."""

from __future__ import annotations

from sparkbase.gate.records import Completion
from sparkbase.qualify.determinism import changes


def test_equal_completions_have_equal_hashes_and_no_change() -> None:
    before = {"p01": Completion("p01", "Paris.", (1, 2, 3))}
    assert changes(before, {"p01": Completion("p01", "Paris.", (1, 2, 3))}) == []


def test_token_ids_decide_when_present() -> None:
    """Same text, other token ids: a change at the first differing token."""
    found = changes({"p01": Completion("p01", "ab", (5, 6, 7))}, {"p01": Completion("p01", "ab", (5, 9, 7))})
    assert [(c.prompt_id, c.what, c.position) for c in found] == [("p01", "token", 1)]
    assert "first differs at token 1" in found[0].describe()


def test_text_is_compared_when_there_are_no_token_ids() -> None:
    found = changes({"p02": Completion("p02", "The answer is 42.")},
                    {"p02": Completion("p02", "The answer is 41.")})
    assert [(c.what, c.position) for c in found] == [("character", 15)]
    assert found[0].before.startswith("2") and found[0].after.startswith("1")


def test_a_longer_completion_differs_where_the_shorter_ends() -> None:
    found = changes({"p": Completion("p", "abc")}, {"p": Completion("p", "abcd")})
    assert found[0].position == 3


def test_switching_between_token_ids_and_text_is_a_change_of_form() -> None:
    found = changes({"p": Completion("p", "x", (1,))}, {"p": Completion("p", "x")})
    assert found[0].what == "form"
    assert "token ids before, text only now" in found[0].describe()


def test_missing_and_new_prompts_are_changes() -> None:
    found = changes({"a": Completion("a", "x")}, {"b": Completion("b", "x")})
    assert [(c.prompt_id, c.what) for c in found] == [("a", "missing"), ("b", "new")]


def test_the_hash_says_which_form_it_hashed() -> None:
    assert Completion("p", "1").digest() != Completion("p", "", (1,)).digest()
    assert Completion("p", "x").digest().startswith("sha256:")
