"""docs/sources/ds41f-recipe.md is generated from the variant baselines' `sources:` and cannot
go stale: the checked-in page is what `tools/sources_doc.py` writes for the shipped
site, and a changed value or source changes the page."""

from __future__ import annotations

from pathlib import Path

from sources_doc import BASELINES, COMMAND, render_sources_doc

from sparkbase.model.site import load_site

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "sources" / "ds41f-recipe.md"


def test_the_checked_in_page_is_the_generated_one() -> None:
    assert PAGE.read_text() == render_sources_doc(load_site(REPO)), (
        f"docs/sources/ds41f-recipe.md is stale: run `.venv/bin/{COMMAND}`")


def test_every_value_of_the_variant_is_on_the_page_with_its_file_and_commit() -> None:
    text = render_sources_doc(load_site(REPO))
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        f"## {name} {load_site(REPO).baselines[name].version}" for name in BASELINES]
    row = next(line for line in text.splitlines()
               if line.startswith("| `nccl.shapes.triangle3.max_nchannels` |"))
    assert "`8`" in row and "config/cluster-4k.json`@`6a70c129`" in row
    assert "blob/6a70c129/config/cluster-4k.json" in row  # a link to the file at that commit
    os_row = next(line for line in text.splitlines() if line.startswith("| `os.release` |"))
    assert "`DGX OS 26.09.2`" in os_row and "docs/setup.md`@`cff464c6`" in os_row


def test_a_changed_source_changes_the_page(site_copy: Path) -> None:
    file = site_copy / "baselines" / "ds41f-7x-64k.yaml"
    text = file.read_text()
    file.write_text(text.replace("  os.release: {kind: recipe, file: docs/setup.md, commit: cff464c6,",
                                 "  os.release: {kind: recipe, file: README.md, commit: e82e8668,"))
    changed = render_sources_doc(load_site(site_copy))
    assert changed != PAGE.read_text()
    os_row = next(line for line in changed.splitlines() if "| `os.release` |" in line)
    assert "README.md`@`e82e8668`" in os_row


def test_the_stock_pages_profile_lists_only_what_it_changes() -> None:
    text = render_sources_doc(load_site(REPO))
    stock = text.split("## ds41f-stock-pages-262k", 1)[1]
    assert "| `kernel.page_size` | `4096` |" in stock and "| `nccl.shapes.ring4` | `null` |" in stock
    assert "| `driver.version` |" not in stock  # the variant's, unchanged
