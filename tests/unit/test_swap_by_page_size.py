"""Swap chosen at boot by the booted kernel's page size (issue 24 point 2), and the recipe's
disabled services (point 4): the model and its sources, the rule, the rendered unit and
script (the script run for real, with stand-in `getconf` and `swapon`), the steps, the
move-back, and the audit on both kernels."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_audit_support import converged_node, shipped

from sparkbase.audit.run import judge_node
from sparkbase.deploy.areas.activation import DaemonReload
from sparkbase.deploy.areas.files import File, FileRetire
from sparkbase.deploy.areas.memory import FstabLineAbsent
from sparkbase.deploy.areas.units import UnitEnabled, UnitRetire
from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.model import SwapEntry, UnitState
from sparkbase.model.baseline import Baseline
from sparkbase.model.memory import BOOT_SWAP_SCRIPT, BOOT_SWAP_UNIT
from sparkbase.model.provenance import RecipeSource
from sparkbase.model.rules import baseline_findings
from sparkbase.model.site import Site
from sparkbase.policy.foreign import foreign_for
from sparkbase.render import managed_lines, render_baseline

VARIANT = "ds41f-7x-64k"
STOCK_PAGES = "ds41f-stock-pages-262k"
SITE_BASELINE = "site-stock-6.17-4k"
UNIT_FILE = f"/etc/systemd/system/{BOOT_SWAP_UNIT}"
LAB_MOK = MokFiles(Path(__file__), Path(__file__))  # any existing files: only their paths are used
#: spark-ds41f scripts/host-recovery at 052248c1: `idle_units`, and gdm3 that apply disables too
RECIPE_IDLE_UNITS = [
    "bluetooth.service",
    "cups.service", "cups.socket", "cups.path", "cups-browsed.service",
    "snapd.service", "snapd.socket", "snapd.seeded.service", "snapd.snap-repair.timer",
    "fwupd-refresh.timer",
    "dgx-dashboard.service", "dgx-dashboard-admin.service",
]


@pytest.fixture(scope="module")
def site() -> Site:
    return shipped()


def _with(baseline: Baseline, **changes: Any) -> Baseline:
    data = baseline.model_dump()
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for part in parents:
            node = node[part]
        node[last] = value
    return Baseline.model_validate(data)


# --- the model, per source ----------------------------------------------------------------


def test_the_variant_swaps_by_page_size_as_the_recipe(site: Site) -> None:
    memory = site.baselines[VARIANT].memory
    assert memory.swap_by_page_size
    # spark3-kernel-memory (db98392f): 4096) swap=/swap.img ;; 65536) swap=/swap-64k.img
    assert memory.swap_files() == {4096: "/swap.img", 65536: "/swap-64k.img"}
    source = site.baselines[VARIANT].sources["memory.swap_by_page_size"]
    assert isinstance(source, RecipeSource)
    assert (source.file, source.commit) == ("host/kernel-memory/spark3-kernel-memory", "db98392f")
    # the stock-pages profile runs one kernel: the installer's fstab line is its swap
    assert not site.baselines[STOCK_PAGES].memory.swap_by_page_size
    assert not site.baselines[SITE_BASELINE].memory.swap_by_page_size


@pytest.mark.parametrize("name", [VARIANT, STOCK_PAGES])
def test_the_disabled_services_are_the_recipes(site: Site, name: str) -> None:
    baseline = site.baselines[name]
    assert baseline.host.disable_services == ["gdm3.service", *RECIPE_IDLE_UNITS]
    source = baseline.sources["host.disable_services"]
    assert isinstance(source, RecipeSource)
    assert (source.file, source.commit) == ("scripts/host-recovery", "052248c1")


def test_the_fallback_kernel_without_a_swap_file_is_refused(site: Site) -> None:
    variant = site.baselines[VARIANT]
    field = ("memory", "swap_by_page_size")
    assert not [f for f in baseline_findings(VARIANT, variant) if f.path == field]
    # the installer's /swap.img left as found: the 4 KiB fallback has no file of its own
    bare = _with(variant, memory__factory_swap=None)
    hits = [f for f in baseline_findings(VARIANT, bare) if f.path == ("memory", "swap_by_page_size")]
    assert len(hits) == 1 and "kernel 7.0.0-1019-nvidia runs 4096-byte pages" in hits[0].message
    none = _with(variant, memory__swap=None)
    hits = [f for f in baseline_findings(VARIANT, none) if f.path == ("memory", "swap_by_page_size")]
    assert hits and "needs a swap file" in hits[0].message


# --- the rendered unit and script ---------------------------------------------------------------


def test_the_variant_renders_the_unit_and_script_and_no_fstab_line(site: Site) -> None:
    files = {f.path: f for f in render_baseline(VARIANT, site.baselines[VARIANT])}
    unit = files[UNIT_FILE]
    assert unit.section == "memory" and unit.mode == 0o644
    for line in ("Type=oneshot", "RemainAfterExit=yes", f"ExecStart={BOOT_SWAP_SCRIPT}", "Before=swap.target",
                 "WantedBy=swap.target", "DefaultDependencies=no"):
        assert line in unit.content.splitlines()
    script = files[BOOT_SWAP_SCRIPT]
    assert script.mode == 0o755 and script.content.startswith("#!/bin/sh\n")
    assert managed_lines(site.baselines[VARIANT]) == []
    for name in (SITE_BASELINE, STOCK_PAGES):
        paths = {f.path for f in render_baseline(name, site.baselines[name])}
        assert UNIT_FILE not in paths and BOOT_SWAP_SCRIPT not in paths


def _run_script(text: str, tmp_path: Path, page_size: int, active: list[str],
                files: tuple[str, ...] = ("swap.img", "swap-64k.img")) -> tuple[int, list[str], str]:
    """Run the rendered script with its swap files under `tmp_path`, `getconf` answering
    `page_size` and `swapon --show` listing `active`; (exit status, files swapped on, stderr)."""
    root = tmp_path / "root"
    root.mkdir()
    for name in files:
        (root / name).write_bytes(b"")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "swapon.log"
    (bin_dir / "getconf").write_text(f"#!/bin/sh\n[ \"$1\" = PAGESIZE ] && echo {page_size}\n")
    shown = "".join(f"{root}/{name}\n" for name in active)
    (bin_dir / "swapon").write_text(
        "#!/bin/sh\n"
        f"case \"$1\" in --show=NAME) printf '%s' '{shown}' ;;\n"
        f"  --) echo \"$2\" >> {log} ;;\n  *) exit 2 ;;\nesac\n")
    for tool in ("getconf", "swapon"):
        (bin_dir / tool).chmod(0o755)
    moved = text.replace("/swap-64k.img", f"{root}/swap-64k.img").replace("/swap.img", f"{root}/swap.img")
    script = tmp_path / "sparkbase-swap"
    script.write_text(moved)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True, check=False)
    swapped = [Path(line).name for line in log.read_text().splitlines()] if log.exists() else []
    return done.returncode, swapped, done.stderr


@pytest.mark.parametrize(("page_size", "active", "files", "status", "swapped", "said"), [
    (65536, [], ("swap.img", "swap-64k.img"), 0, ["swap-64k.img"], ""),
    (4096, [], ("swap.img", "swap-64k.img"), 0, ["swap.img"], ""),
    (4096, ["swap.img"], ("swap.img", "swap-64k.img"), 0, [], ""),  # already on: nothing to do
    (16384, [], ("swap.img", "swap-64k.img"), 1, [], "no swap file for page size 16384"),
    (4096, [], ("swap-64k.img",), 1, [], "swap.img is missing"),
], ids=["64k", "4k-fallback", "already-active", "other-page-size", "file-missing"])
def test_the_script_swaps_on_the_file_for_the_running_page_size(
    site: Site, tmp_path: Path, page_size: int, active: list[str], files: tuple[str, ...], status: int,
    swapped: list[str], said: str,
) -> None:
    rendered = render_baseline(VARIANT, site.baselines[VARIANT])
    text = next(f.content for f in rendered if f.path == BOOT_SWAP_SCRIPT)
    code, calls, stderr = _run_script(text, tmp_path, page_size, active, files)
    assert (code, calls) == (status, swapped), stderr
    assert said in stderr


# --- the steps and the move-back ----------------------------------------------------------------


def test_apply_makes_the_file_drops_the_old_line_and_enables_the_unit(site: Site) -> None:
    steps = build_steps(with_assignment(site, ["spark1"], VARIANT), "spark1", LAB_MOK)
    kinds = [s.kind for s in steps]
    assert "fstab-line" not in kinds
    absent = steps[kinds.index("fstab-line-absent")].args
    assert isinstance(absent, FstabLineAbsent)
    match = absent.match
    assert re.fullmatch(match, "/swap-64k.img none swap sw 0 0")  # what sparkbase 1.4.0 wrote
    for other in ("/swap-64k.img none swap sw,pri=5 0 0", "/swap-64k.img\tnone\tswap\tsw\t0\t0",
                  "#/swap-64k.img none swap sw 0 0", "/swap-64kXimg none swap sw 0 0"):
        assert not re.fullmatch(match, other), other  # anything else is the site's line
    reload = next(s for s in steps if s.args == DaemonReload(unit=BOOT_SWAP_UNIT))
    assert reload.after_change_of == UNIT_FILE and reload.section == "memory"
    # recorded, under the baseline's name
    enable = next(s for s in steps if s.args == UnitEnabled(unit=BOOT_SWAP_UNIT, baseline=VARIANT))
    assert enable.section == "memory"
    order = [kinds.index("swap-file"), kinds.index("swapon"), steps.index(reload), steps.index(enable)]
    assert order == sorted(order)
    unit_file = max(i for i, s in enumerate(steps) if isinstance(s.args, File) and s.args.path == UNIT_FILE)
    assert unit_file < order[2]


@pytest.mark.parametrize("name", [SITE_BASELINE, STOCK_PAGES])
def test_other_baselines_nodes_retire_the_unit_then_its_files(site: Site, name: str) -> None:
    assert foreign_for(site, name).boot_swap == (VARIANT,)
    assert foreign_for(site, VARIANT).boot_swap == ()
    steps = build_steps(with_assignment(site, ["spark1"], name), "spark1", LAB_MOK)
    retired = [(s.kind, s.args.unit if isinstance(s.args, UnitRetire) else s.args.path, s.section)
               for s in steps if isinstance(s.args, UnitRetire | FileRetire) and s.section == "memory"]
    assert retired == [("unit-retire", BOOT_SWAP_UNIT, "memory"), ("file-retire", UNIT_FILE, "memory"),
                       ("file-retire", BOOT_SWAP_SCRIPT, "memory")]


# --- the audit on both kernels ------------------------------------------------------------------


def _judge(site: Site, check: str, **facts: Any) -> tuple[str, str]:
    expected, node = converged_node(site, "spark2", VARIANT)
    result = next(r for r in judge_node(expected, replace(node, **facts)) if r.id == check)
    return result.status, str(result.observed)


def _fallback(**facts: Any) -> dict[str, Any]:
    """The facts of a variant node booted into its 4 KiB fallback kernel."""
    return {"kernel_release": "7.0.0-1019-nvidia", "page_size": 4096, **facts}


def test_the_64k_kernel_is_judged_on_its_own_file(site: Site) -> None:
    assert _judge(site, "memory.swap")[0] == "pass"
    assert _judge(site, "memory.swap.boot_unit")[0] == "pass"
    assert _judge(site, "memory.swap.fstab")[0] == "pass"
    status, seen = _judge(site, "memory.swap", swaps=(SwapEntry("/swap.img", 8 * 1024**3),))
    assert status == "fail" and "not active" in seen


def test_the_fallback_kernel_is_judged_on_the_installers_file(site: Site) -> None:
    on = (SwapEntry("/swap.img", 8 * 1024**3 - 4096),)
    status, seen = _judge(site, "memory.swap", **_fallback(swaps=on))
    assert status == "pass" and seen == "/swap.img active, header 4096"
    status, seen = _judge(site, "memory.swap", **_fallback(swaps=()))
    assert status == "fail" and seen == "/swap.img: not active"
    unsigned = {"/swap.img": None}
    status, seen = _judge(site, "memory.swap", **_fallback(swaps=on, swap_header_page_size=unsigned))
    assert status == "fail" and "header page size none" in seen
    assert _judge(site, "memory.swap.factory", **_fallback(swaps=on))[0] == "pass"  # noauto, not swapped off


def test_a_kernel_of_a_page_size_with_no_file_fails(site: Site) -> None:
    status, seen = _judge(site, "memory.swap", page_size=16384, swaps=())
    assert status == "fail" and seen == "the baseline has none"


def test_the_unit_not_enabled_fails(site: Site) -> None:
    _, node = converged_node(site, "spark2", VARIANT)
    units = {**node.units, BOOT_SWAP_UNIT: UnitState("", "inactive")}
    status, seen = _judge(site, "memory.swap.boot_unit", units=units)
    assert status == "fail" and seen == "not installed"


# --- services a node does not have --------------------------------------------------------------


def test_a_unit_the_node_does_not_have_audits_as_absent(site: Site) -> None:
    _, node = converged_node(site, "spark2", VARIANT)
    units = {**node.units, "cups.path": UnitState("", "inactive"),
             "snapd.socket": UnitState("enabled", "active")}
    assert _judge(site, "service.cups.path", units=units) == ("pass", "absent (no such unit on the node)")
    status, seen = _judge(site, "service.snapd.socket", units=units)
    assert status == "fail" and seen == "enabled, active"
