"""docs/cli.md is generated from the parser; it must not drift from the code."""

from __future__ import annotations

from pathlib import Path

from cli_reference import render_reference

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_cli_reference_is_current() -> None:
    assert REFERENCE.read_text() == render_reference(), (
        "docs/cli.md is stale: run `.venv/bin/python tools/cli_reference.py > docs/cli.md`"
    )


def test_reference_covers_every_command() -> None:
    text = render_reference()
    for command in ("validate", "render", "lock", "compare", "schema", "plan", "apply", "audit",
                    "preflight", "triggers", "lab"):
        assert f"## sparkbase {command}\n" in text
