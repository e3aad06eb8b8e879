"""The variant keeps the installer's /swap.img (`noauto` in /etc/fstab) and the 4 KiB
fallback kernel, as the spark-ds41f recipe does (docs/sources/ds41f-research.md, "Memory
policy and swap" and "Kernel"): the model and its rules, the fstab edit and its undo (on the
real curtin fstab), what other baselines' nodes retire, the ownership record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkbase.model.baseline import Baseline
from sparkbase.model.ownership import Kind, OwnershipRecord, edited_line, parse_record
from sparkbase.model.provenance import RecipeSource
from sparkbase.model.rules import baseline_findings
from sparkbase.model.site import Site, load_site
from sparkbase.policy.foreign import foreign_for, foreign_fstab_edits
from sparkbase.policy.fstab import decide_noauto, decide_restore, noauto_line

SITE = Path(__file__).resolve().parents[2]
VARIANT = "ds41f-7x-64k"
STOCK_PAGES = "ds41f-stock-pages-262k"
SITE_BASELINE = "site-stock-6.17-4k"
#: the real fstab an Ubuntu installer (curtin) writes, with its /swap.img line
REAL_FSTAB = (SITE / "tests/fixtures/real/etc_fstab__ubuntu_curtin_swap.img.txt").read_text()
FACTORY_LINE = "/swap.img\tnone\tswap\tsw\t0\t0"
NOAUTO_LINE = "/swap.img\tnone\tswap\tnoauto\t0\t0"
WHEN = "2026-12-01T05:00:00Z"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(SITE)


# --- the model, per source ----------------------------------------------------------------


def test_the_variant_keeps_the_recipes_fallback_kernel(site: Site) -> None:
    baseline = site.baselines[VARIANT]
    fallback = baseline.kernel.fallback
    assert fallback is not None
    assert (fallback.release, fallback.package_version) == ("7.0.0-1019-nvidia", "7.0.0-1019.19~24.04.2")
    source = baseline.sources["kernel.fallback"]
    assert isinstance(source, RecipeSource) and source.file == "config/kernel-trial.json"
    pins = {pin.name: pin.version for pin in baseline.packages()}
    assert pins["linux-image-7.0.0-1019-nvidia"] == "7.0.0-1019.19~24.04.2"
    assert pins["linux-modules-7.0.0-1019-nvidia"] == "7.0.0-1019.19~24.04.2"
    # the fleet's kmod for the 4 KiB kernel (runs/packages.json, 583b4eda)
    assert pins["linux-modules-nvidia-580-open-7.0.0-1019-nvidia"] == "7.0.0-1019.19~24.04.2+1"
    # the default by menu-entry id, as the recipe pins it (docs/setup.md 0925e797)
    uuid = "${GRUB_DEVICE_UUID}"
    wanted = f"gnulinux-advanced-{uuid}>gnulinux-7.0.0-1019-nvidia-64k-advanced-{uuid}"
    assert baseline.kernel.grub_entry == wanted


def test_the_variant_marks_the_factory_swap_noauto(site: Site) -> None:
    baseline = site.baselines[VARIANT]
    factory = baseline.memory.factory_swap
    assert factory is not None
    assert (factory.path, factory.fstab, factory.swapoff) == ("/swap.img", "noauto", False)
    source = baseline.sources["memory.factory_swap"]
    assert isinstance(source, RecipeSource)
    assert source.file == "experiments/2026-10-02-kernel-64k/install-boot-support.sh"


def test_stock_pages_swaps_on_the_factory_file_and_keeps_no_fallback(site: Site) -> None:
    """The 4 KiB profile runs the fallback kernel itself and swaps on /swap.img (the recipe's
    boot service: `4096) swap=/swap.img`)."""
    baseline = site.baselines[STOCK_PAGES]
    assert baseline.kernel.fallback is None
    factory = baseline.memory.factory_swap
    assert factory is not None and (factory.path, factory.fstab) == ("/swap.img", "as-installed")
    assert baseline.memory.swap is None
    source = baseline.sources["memory.factory_swap"]
    assert isinstance(source, RecipeSource) and source.file == "host/kernel-memory/spark3-kernel-memory"


def _with(baseline: Baseline, **changes: Any) -> Baseline:
    data = baseline.model_dump()
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for part in parents:
            node = node[part]
        node[last] = value
    return Baseline.model_validate(data)


RULE_CASES = [
    ({"kernel__fallback": {"release": "7.0.0-1019-nvidia-64k", "package_version": "7.0.0-1019.19~24.04.2"}},
     ("kernel", "fallback", "release"), "is the baseline's own kernel"),
    ({"kernel__fallback": {"release": "7.0.0-1019-nvidia", "package_version": "7.0.0-1019.19"
                           "~24.04.2+1"}},
     ("kernel", "fallback", "package_version"), "cannot be the package version of kernel 7.0.0-1019-nvidia"),
    ({"memory__swap__path": "/swap.img"}, ("memory", "swap", "path"), "is the installer's swap file"),
    ({"memory__factory_swap": {"path": "/swap.img", "fstab": "as-installed", "swapoff": False}},
     ("memory", "factory_swap", "fstab"), "cannot swap on it"),
]


@pytest.mark.parametrize(("changes", "path", "message"), RULE_CASES, ids=[c[1][-1] for c in RULE_CASES])
def test_rules_name_the_field(site: Site, changes: dict[str, Any], path: tuple[str, ...],
                              message: str) -> None:
    baseline = _with(site.baselines[VARIANT], **changes)
    hits = [f for f in baseline_findings(VARIANT, baseline) if f.path == path]
    assert hits and message in hits[0].message


def test_swapoff_needs_noauto(site: Site) -> None:
    baseline = _with(site.baselines[STOCK_PAGES],
                     memory__factory_swap={"path": "/swap.img", "fstab": "as-installed", "swapoff": True})
    field = ("memory", "factory_swap", "swapoff")
    hits = [f for f in baseline_findings(STOCK_PAGES, baseline) if f.path == field]
    assert hits and "only with fstab: noauto" in hits[0].message


def test_the_shipped_baselines_break_none_of_these_rules(site: Site) -> None:
    for name in (VARIANT, STOCK_PAGES):
        paths = {f.path[:2] for f in baseline_findings(name, site.baselines[name]) if f.severity == "error"}
        assert ("kernel", "fallback") not in paths and ("memory", "factory_swap") not in paths


# --- the fstab edit and its undo, as data ----------------------------------------------------


def test_the_recipes_rewrite_of_the_real_line() -> None:
    """install-boot-support.sh: options without sw/auto/noauto, then noauto; tab-joined."""
    assert noauto_line(FACTORY_LINE) == NOAUTO_LINE
    assert noauto_line("/swap.img none swap sw,pri=5,auto 0 0") == "/swap.img\tnone\tswap\tpri=5,noauto\t0\t0"


def _record(original: str = FACTORY_LINE, written: str = NOAUTO_LINE) -> OwnershipRecord:
    return OwnershipRecord().with_items([edited_line("/swap.img", VARIANT, WHEN, original=original,
                                                     written=written)])


def test_noauto_edits_only_the_swap_line_and_records_it_exactly() -> None:
    edit = decide_noauto("/swap.img", REAL_FSTAB, OwnershipRecord(), VARIANT, WHEN)
    assert edit.text is not None
    assert edit.text == REAL_FSTAB.replace(FACTORY_LINE, NOAUTO_LINE)
    assert edit.record is not None
    assert (edit.record.kind, edit.record.target) == (Kind.FSTAB_LINE, "/swap.img")
    assert (edit.record.original, edit.record.written) == (FACTORY_LINE, NOAUTO_LINE)


def test_restore_gives_back_the_very_file_it_found() -> None:
    marked = decide_noauto("/swap.img", REAL_FSTAB, OwnershipRecord(), VARIANT, WHEN)
    assert marked.text is not None and marked.record is not None
    owned = OwnershipRecord().with_items([marked.record])
    back = decide_restore("/swap.img", marked.text, owned)
    assert back.text == REAL_FSTAB
    assert back.forget == ((Kind.FSTAB_LINE, "/swap.img"),)


NOAUTO_CASES = [
    # (name, fstab text, reason substring, edits)
    ("already-noauto", REAL_FSTAB.replace(FACTORY_LINE, NOAUTO_LINE), "is noauto", False),
    ("no-line", "UUID=1 / ext4 defaults 0 1\n", "has no line for /swap.img", False),
    ("two-lines", REAL_FSTAB + FACTORY_LINE + "\n", "kept: /etc/fstab has 2 lines", False),
    ("not-swap", "/swap.img /mnt ext4 defaults 0 0\n",
     "kept: the /etc/fstab line for /swap.img is not a swap", False),
    ("commented", "#/swap.img none swap sw 0 0\n", "has no line for /swap.img", False),
    ("no-file", None, "does not exist", False),
]


@pytest.mark.parametrize(("text", "reason", "edits"), [c[1:] for c in NOAUTO_CASES],
                         ids=[c[0] for c in NOAUTO_CASES])
def test_noauto_leaves_what_is_not_one_swap_line(text: str | None, reason: str, edits: bool) -> None:
    edit = decide_noauto("/swap.img", text, OwnershipRecord(), VARIANT, WHEN)
    assert (edit.text is not None) == edits and edit.record is None
    assert reason in edit.reason


RESTORE_CASES = [
    ("changed-since", REAL_FSTAB.replace(FACTORY_LINE, "/swap.img\tnone\tswap\tnoauto,pri=3\t0\t0"),
     _record(),
     "kept: the /etc/fstab line for /swap.img changed since sparkbase marked it noauto"),
    ("line-gone", "UUID=1 / ext4 defaults 0 1\n", _record(),
     "kept: /etc/fstab has no line for /swap.img any more"),
    ("someone-elses-noauto", REAL_FSTAB.replace(FACTORY_LINE, NOAUTO_LINE), OwnershipRecord(),
     "kept: the /etc/fstab line for /swap.img was not marked noauto by sparkbase"),
    ("never-edited", REAL_FSTAB, OwnershipRecord(), "sparkbase edited no /etc/fstab line"),
    ("already-back", REAL_FSTAB, _record(), "is as sparkbase found it"),
    ("duplicated", REAL_FSTAB.replace(FACTORY_LINE, NOAUTO_LINE) + NOAUTO_LINE + "\n", _record(), "kept: "),
]


@pytest.mark.parametrize(("text", "owned", "reason"), [c[1:] for c in RESTORE_CASES],
                         ids=[c[0] for c in RESTORE_CASES])
def test_restore_keeps_what_sparkbase_did_not_write(text: str, owned: OwnershipRecord, reason: str) -> None:
    edit = decide_restore("/swap.img", text, owned)
    assert edit.text is None and edit.forget == ()
    assert reason in edit.reason


# --- other baselines' nodes -----------------------------------------------------------------


def test_nodes_of_baselines_without_noauto_put_the_line_back(site: Site) -> None:
    assert foreign_fstab_edits(site, site.baselines[SITE_BASELINE]) == ("/swap.img",)
    assert foreign_fstab_edits(site, site.baselines[STOCK_PAGES]) == ("/swap.img",)
    assert foreign_fstab_edits(site, site.baselines[VARIANT]) == ()


def test_the_variant_never_retires_its_fallback_kernel(site: Site) -> None:
    foreign = {pin.name for pin in foreign_for(site, VARIANT).pins}
    for pin in site.baselines[VARIANT].kernel.fallback.packages("580-open"):  # type: ignore[union-attr]
        assert pin.name not in foreign


def test_other_nodes_retire_the_fallback_as_a_kernel(site: Site) -> None:
    """On the site baseline, the fallback's packages are another kernel's: purged (if
    sparkbase installed them) only once the site's kernel runs."""
    pins = {pin.name: pin for pin in foreign_for(site, SITE_BASELINE).pins}
    assert pins["linux-image-7.0.0-1019-nvidia"].kernel == "7.0.0-1019-nvidia"
    assert pins["linux-modules-nvidia-580-open-7.0.0-1019-nvidia"].kernel == "7.0.0-1019-nvidia"


# --- the ownership record -------------------------------------------------------------------


def test_an_edited_line_round_trips_through_the_record_exactly() -> None:
    record = _record()
    text = record.to_json()
    assert json.loads(text)["format"] == 3  # 3 since edited files (netplan)
    again = parse_record(text).find(Kind.FSTAB_LINE, "/swap.img")
    assert again is not None and (again.original, again.written) == (FACTORY_LINE, NOAUTO_LINE)


def test_a_format_1_record_is_still_read() -> None:
    text = '{"format": 1, "items": [{"kind": "swap", "target": "/swap-64k.img", "uuid": "u", ' \
           '"baseline": "b", "recorded_at": "t"}]}'
    assert parse_record(text).find(Kind.SWAP, "/swap-64k.img") is not None


# --- the deploy: what is written, and the GRUB entry ------------------------------------------


def test_fstab_is_rewritten_only_when_it_reads_back_byte_for_byte() -> None:
    import hashlib

    from sparkbase.deploy.operations.memory import exact_text
    from sparkbase.facts.model import FileInfo

    def info(data: bytes) -> FileInfo:
        return FileInfo(0o644, hashlib.sha256(data).hexdigest())

    assert exact_text(REAL_FSTAB, info(REAL_FSTAB.encode())) is None
    # a file without its final newline reads back with one: never rewritten
    no_newline = REAL_FSTAB.rstrip("\n")
    assert "kept: /etc/fstab does not read back byte for byte" in str(
        exact_text(no_newline + "\n", info(no_newline.encode())))


def test_update_grub_runs_until_the_fallback_has_an_entry() -> None:
    from sparkbase.deploy.operations.kernel import grub_stale
    from sparkbase.facts.model import GrubBoot, GrubEntry

    advanced = "Advanced options for Ubuntu>Ubuntu, with Linux "
    main = GrubEntry(f"{advanced}7.0.0-1019-nvidia-64k", "7.0.0-1019-nvidia-64k")
    fallback = GrubEntry(f"{advanced}7.0.0-1019-nvidia", "7.0.0-1019-nvidia")
    rescue = GrubEntry(fallback.path + " (recovery mode)", "7.0.0-1019-nvidia", recovery=True)
    without = GrubBoot((main, rescue), main.path, main)
    assert "no entry for the fallback kernel 7.0.0-1019-nvidia" in str(
        grub_stale(without, main.release or "", main.path, [], [], "7.0.0-1019-nvidia"))
    with_it = GrubBoot((main, fallback, rescue), main.path, main)
    assert grub_stale(with_it, main.release or "", main.path, [], [], "7.0.0-1019-nvidia") is None


# --- the audit ----------------------------------------------------------------------------------


def _judge(site: Site, baseline: str, check: str, **facts: Any) -> tuple[str, str]:
    from dataclasses import replace

    from test_audit_support import converged_node

    from sparkbase.audit.run import judge_node

    expected, node = converged_node(site, "spark2", baseline)
    result = next(r for r in judge_node(expected, replace(node, **facts)) if r.id == check)
    return result.status, str(result.observed)


@pytest.mark.parametrize("baseline", [VARIANT, STOCK_PAGES])
@pytest.mark.parametrize("check", ["kernel.fallback", "memory.swap.factory"])
def test_a_converged_node_passes(site: Site, baseline: str, check: str) -> None:
    status, _ = _judge(site, baseline, check)
    assert status == ("skip" if (check, baseline) == ("kernel.fallback", STOCK_PAGES) else "pass")


def test_a_fallback_without_its_entry_or_package_fails(site: Site) -> None:
    from dataclasses import replace

    from test_audit_support import converged_node

    _, node = converged_node(site, "spark2", VARIANT)
    assert node.grub is not None
    entries = tuple(e for e in node.grub.entries if e.release != "7.0.0-1019-nvidia")
    status, seen = _judge(site, VARIANT, "kernel.fallback", grub=replace(node.grub, entries=entries))
    assert status == "fail" and "no GRUB entry for 7.0.0-1019-nvidia" in seen
    packages = {k: v for k, v in node.packages.items() if k != "linux-image-7.0.0-1019-nvidia"}
    status, seen = _judge(site, VARIANT, "kernel.fallback", packages=packages)
    assert status == "fail" and "linux-image-7.0.0-1019-nvidia not installed" in seen


def test_the_factory_swap_judged_from_the_real_fstab(site: Site) -> None:
    from sparkbase.facts.model import SwapEntry
    from sparkbase.facts.parsers.memory import parse_fstab

    as_installed = parse_fstab(REAL_FSTAB)
    marked = parse_fstab(REAL_FSTAB.replace(FACTORY_LINE, NOAUTO_LINE))
    status, seen = _judge(site, VARIANT, "memory.swap.factory", fstab=as_installed)
    assert status == "fail" and "activates it at boot (options sw)" in seen
    assert _judge(site, VARIANT, "memory.swap.factory", fstab=marked)[0] == "pass"
    active = (SwapEntry("/swap.img", 8 * 1024**3),)
    assert _judge(site, STOCK_PAGES, "memory.swap.factory", fstab=as_installed, swaps=active)[0] == "pass"
    status, seen = _judge(site, STOCK_PAGES, "memory.swap.factory", fstab=marked, swaps=())
    assert status == "fail" and "does not activate it at boot" in seen and "not active" in seen


def test_swapon_is_read_for_the_factory_swap_only_when_judged(site: Site) -> None:
    """Its activity matters as stock-pages' swap (or with swapoff), or as the fallback
    kernel's swap under swap_by_page_size, not when merely noauto."""
    from dataclasses import replace

    from sparkbase.audit.expected import expected_for
    from sparkbase.deploy.assign import with_assignment

    assert expected_for(site, "spark1", STOCK_PAGES).plan().swap_paths == ("/swap.img",)
    assert expected_for(site, "spark1", VARIANT).plan().swap_paths == ("/swap-64k.img", "/swap.img")
    plain = _with(site.baselines[VARIANT], memory__swap_by_page_size=False)
    mended = with_assignment(replace(site, baselines={**site.baselines, VARIANT: plain}), ["spark1"], VARIANT)
    assert expected_for(mended, "spark1").plan().swap_paths == ("/swap-64k.img",)


def test_a_site_node_left_noauto_by_another_baseline_is_warned(site: Site) -> None:
    from sparkbase.facts.parsers.memory import parse_fstab

    marked = parse_fstab(REAL_FSTAB.replace(FACTORY_LINE, NOAUTO_LINE))
    status, seen = _judge(site, SITE_BASELINE, "memory.swap.factory_foreign", fstab=marked)
    assert status == "fail" and "/swap.img noauto" in seen
    as_installed = parse_fstab(REAL_FSTAB)
    assert _judge(site, SITE_BASELINE, "memory.swap.factory_foreign", fstab=as_installed)[0] == "pass"
    # stock-pages judges the line itself (memory.swap.factory); the variant asks for noauto
    assert _judge(site, STOCK_PAGES, "memory.swap.factory_foreign", fstab=marked)[0] == "skip"
    assert _judge(site, VARIANT, "memory.swap.factory_foreign", fstab=marked)[0] == "skip"


SWAPON_CASES = [
    # (name, found, active, running page size, swapon?, reason)
    ("on-4k", {"size": 8 << 30, "mode": 0o600, "header_page_size": 4096}, False, 4096, True, ""),
    ("active", None, True, 4096, False, "/swap.img is active"),
    ("64k-running", {"size": 8 << 30, "mode": 0o600, "header_page_size": 4096}, False, 65536, False,
     "reboot pending"),
    ("gone", None, False, 4096, False, "kept: /swap.img does not exist"),
    ("no-signature", {"size": 8 << 30, "mode": 0o600, "header_page_size": None}, False, 4096, False,
     "kept: /swap.img has no swap signature"),
]


@pytest.mark.parametrize(("found", "active", "running", "swapon", "reason"), [c[1:] for c in SWAPON_CASES],
                         ids=[c[0] for c in SWAPON_CASES])
def test_the_factory_swap_is_switched_on_only_as_it_is(found: dict[str, Any] | None, active: bool,
                                                       running: int, swapon: bool, reason: str) -> None:
    from sparkbase.deploy.operations.memory import decide_factory_swapon

    decision = decide_factory_swapon("/swap.img", found, active, running)
    assert decision.commands == ([["swapon", "/swap.img"]] if swapon else [])
    assert reason in decision.reason
