"""Retiring what other baselines left on a node: foreign pins, steps, and decisions as data.

`retire_cases/*.json`: one case per file, an operation's arguments and the facts it reads
in (`owned`: the node's ownership record items), the commands it yields (or the reason it
does nothing, or the refusal it raises) and the record entries it forgets out.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lab_mok_pair import lab_mok_dir

from sparkbase.cli.deploying import print_report
from sparkbase.deploy.areas.packages import PackagesRetire
from sparkbase.deploy.areas.units import UnitRetire
from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.operations.base import Decision
from sparkbase.deploy.operations.memory import NotSparkbases, decide_swap_file
from sparkbase.deploy.results import KEPT, NodeResult, NodeStatus, OpResult, Report
from sparkbase.deploy.retire import (
    decide_dkms_retire,
    decide_mok_dir_retire,
    decide_mok_kept,
    decide_packages_kept,
    decide_packages_retire,
    decide_swap_retire,
    decide_unit_retire,
    dkms_builds,
)
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.parsers.modules import parse_dkms_status
from sparkbase.model.ownership import Entry, OwnershipRecord
from sparkbase.model.site import Site, load_site
from sparkbase.policy import ownership
from sparkbase.policy.foreign import foreign_for

REPO = Path(__file__).resolve().parents[2]
CASES = sorted((Path(__file__).parent / "retire_cases").glob("*.json"))
LAB_MOK = MokFiles.from_dir(lab_mok_dir())
SITE_BASELINE = "site-stock-6.17-4k"
VARIANT = "ds41f-7x-64k"
STOCK_PAGES = "ds41f-stock-pages-262k"
RETIRE_KINDS = {"dkms-retire", "packages-retire", "packages-kept", "mok-dir-retire", "mok-kept",
                "unit-retire"}

#: operation -> its pure decision, called with the case's args and facts
DECIDE: dict[str, Callable[..., Decision]] = {
    "packages_retire": decide_packages_retire,
    "packages_kept": decide_packages_kept,
    "dkms_retire": decide_dkms_retire,
    "mok_dir_retire": decide_mok_dir_retire,
    "mok_kept": decide_mok_kept,
    "swap_retire": decide_swap_retire,
    "unit_retire": decide_unit_retire,
    "swap_file": decide_swap_file,
}


def _facts(raw: dict[str, Any]) -> dict[str, Any]:
    """The case's facts as the decisions take them (record and directory entries typed)."""
    facts = dict(raw)
    if "owned" in facts:
        facts["owned"] = OwnershipRecord.model_validate({"items": facts["owned"]})
    if facts.get("entries") is not None:
        facts["entries"] = [Entry(**entry) for entry in facts["entries"]]
    return facts


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_retire_decision(case_file: Path) -> None:
    case: dict[str, Any] = json.loads(case_file.read_text())
    decide = DECIDE[case["op"]]
    if "raises" in case:
        with pytest.raises(NotSparkbases, match=re.escape(case["raises"])):
            decide(**case["args"], **_facts(case["facts"]))
        return
    decision = decide(**case["args"], **_facts(case["facts"]))
    assert decision.commands == case["commands"]
    assert decision.reason == case["reason"]
    assert bool(decision.commands) != bool(decision.reason)  # a change, or why not: never both
    assert [[kind, target] for kind, target in decision.forget] == case.get("forget", [])
    if not decision.commands and ("owned" in case["facts"] or case["op"] == "mok_kept"):
        assert decision.forget == ()  # nothing is forgotten that was not removed


def test_every_retire_operation_has_a_case_that_keeps_what_is_not_sparkbases() -> None:
    cases = [json.loads(c.read_text()) for c in CASES]
    kept_ops = {c["op"] for c in cases if c["reason"].startswith(KEPT) or "raises" in c}
    assert kept_ops >= set(DECIDE) - {"packages_retire"}  # packages_kept reports for it
    assert KEPT == ownership.KEPT


def test_foreign_pins_of_the_site_baseline_are_the_variants_leftovers(site: Site) -> None:
    foreign = foreign_for(site, SITE_BASELINE)
    kernels = {f"{stem}-{kernel}": kernel for kernel in ("7.0.0-1019-nvidia-64k", "7.0.0-1019-nvidia")
               for stem in ("linux-headers", "linux-image", "linux-modules", "linux-modules-nvidia-580-open",
                            "linux-tools")}
    assert {pin.name: pin.kernel for pin in foreign.pins} == {
        "dgx-spark-fan-control": None,
        "nvidia-kernel-source-580-open": None,
        "libnccl2": None,  # the variant's 1.4.0 pinned it (retired_packages)
        **kernels,
    }
    assert foreign.services == (("dgx-fan-control.service", (VARIANT, STOCK_PAGES)),)
    dkms = [(d.name, d.version, d.baselines) for d in foreign.dkms]
    assert dkms == [("dgx-spark-fan-control", "0.1.3", (VARIANT, STOCK_PAGES)),
                    ("dgx-spark-memory-saver", "0.2.0", (VARIANT,))]
    assert [m.path for m in foreign.mok_dirs] == ["/var/lib/shim-signed/mok"]
    # the fan module's boot entry goes; the modeset override the variants purge comes back
    assert foreign.files == (("/etc/modules-load.d/dgx_ec_fan_control.conf", (VARIANT, STOCK_PAGES)),)
    assert foreign.restore == (("nvidia-drm-options-modeset0", (VARIANT, STOCK_PAGES)),)


@pytest.mark.parametrize("name", [SITE_BASELINE, VARIANT, STOCK_PAGES])
def test_foreign_pins_are_exactly_what_others_pin_and_this_one_does_not(site: Site, name: str) -> None:
    """...and what an earlier version of any baseline pinned (`retired_packages`), this one's too."""
    own = {pin.name for pin in site.baselines[name].packages()}
    others = {pin.name for other, b in site.baselines.items() if other != name for pin in b.packages()}
    retired = {r.name for b in site.baselines.values() for r in b.retired_packages}
    foreign = foreign_for(site, name)
    assert retired == {"libnccl2"}
    assert set(foreign.package_names()) == (others | retired) - own
    running = site.baselines[name].kernel.release
    assert all(pin.kernel != running for pin in foreign.pins)  # never this baseline's kernel


def test_a_retired_package_is_retired_like_a_foreign_pin_only_where_both_manage_its_section(
        site: Site) -> None:
    """libnccl2, which the variant pinned up to 1.4.0: its own nodes retire it (sparkbase
    installed it there), the site's nodes too; a baseline leaving nccl as found does not, and
    one pinning it again keeps it."""
    variant = foreign_for(site, VARIANT)
    assert [(p.name, p.baselines, p.section) for p in variant.pins if p.name == "libnccl2"] == [
        ("libnccl2", (f"earlier versions of {VARIANT}", f"earlier versions of {STOCK_PAGES}"), "nccl")]
    steps = [s for s in _retire(site, "spark2", VARIANT) if isinstance(s.args, PackagesRetire)]
    assert any("libnccl2" in s.args.names and s.args.target_kernel is None for s in steps)
    own = site.baselines[SITE_BASELINE]
    as_found = dataclasses.replace(site, baselines={**site.baselines, SITE_BASELINE: own.model_copy(
        update={"managed": [section for section in own.managed if section != "nccl"]})})
    assert "libnccl2" not in foreign_for(as_found, SITE_BASELINE).package_names()


def test_a_baseline_that_signs_the_saver_keeps_its_own_dkms_and_key_dir(site: Site) -> None:
    foreign = foreign_for(site, VARIANT)
    assert foreign.dkms == () and foreign.mok_dirs == () and foreign.services == ()
    assert foreign.files == () and foreign.restore == ()  # fan control and the purge are its own too
    assert foreign.package_names() == [
        "libnccl2",  # its own 1.4.0 pinned it
        "linux-headers-6.17.0-1032-nvidia",
        "linux-image-6.17.0-1032-nvidia",
        "linux-modules-6.17.0-1032-nvidia",
        "linux-modules-nvidia-580-open-6.17.0-1032-nvidia",
        "linux-tools-6.17.0-1032-nvidia",
        "nccl-site-ring4",
    ]
    # stock-pages' kernel is the variant's fallback (kernel.fallback): never retired here
    assert not [name for name in foreign.package_names() if name.endswith("-7.0.0-1019-nvidia")]


def _retire(site: Site, node: str, baseline: str | None = None) -> list[Any]:
    if baseline:
        site = with_assignment(site, [node], baseline)
    steps = build_steps(site, node, LAB_MOK)
    return [s for s in steps if s.kind in RETIRE_KINDS or s.name.startswith("retire: ")]


def test_retire_steps_run_in_a_safe_order_with_kernel_packages_gated(site: Site) -> None:
    steps = build_steps(site, "spark1")
    kinds = [s.kind for s in steps]
    fan = next(i for i, s in enumerate(steps)
               if isinstance(s.args, UnitRetire) and s.args.unit == "dgx-fan-control.service")
    purges = [(i, s.section, s.args) for i, s in enumerate(steps) if isinstance(s.args, PackagesRetire)]
    assert kinds.index("hold") < fan < kinds.index("dkms-retire") < purges[0][0]
    plains = [(section, args) for _, section, args in purges if args.target_kernel is None]
    kernels = [(section, args) for _, section, args in purges if args.target_kernel is not None]
    # no particular kernel's first
    assert [(section, args) for _, section, args in purges] == [*plains, *kernels]
    # one purge per section: the host NCCL library the variant pinned up to 1.4.0 (1.5.0 builds
    # NCCL into its image), the memory saver's build input (NVIDIA's kernel source) and the
    # fan-control package
    assert [(section, args.names) for section, args in plains] == [
        ("nccl", ["libnccl2"]), ("memory", ["nvidia-kernel-source-580-open"]),
        ("host", ["dgx-spark-fan-control"])]
    assert all(section == "kernel" for section, _ in kernels)
    running = site.baseline_of("spark1").kernel.release
    assert [args.target_kernel for _, args in kernels] == [running] * 2  # the variant's and stock-pages'
    for (_, kernel), release in zip(kernels, ["7.0.0-1019-nvidia", "7.0.0-1019-nvidia-64k"], strict=True):
        assert all(n.endswith(f"-{release}") for n in kernel.names)
    assert kinds.index("mok-dir-retire") < kinds.index("file")
    # the shipped variant pins no MOK (site to confirm): no enrolled key is known to report
    assert "mok-kept" not in kinds


def test_every_node_and_baseline_names_its_retire_steps(site: Site) -> None:
    names = [s.name for s in _retire(site, "spark2", VARIANT)]
    assert names == [
        "retire: unhold and purge libnccl2, nccl-site-ring4 (pinned only by other baselines or earlier "
        "versions)",
        "retire: unhold and purge the 6.17.0-1032-nvidia kernel packages (5; once "
        "7.0.0-1019-nvidia-64k runs)",
        "keep: other baselines' kernel packages sparkbase did not install (reported)",
        "keep: other baselines' nccl packages sparkbase did not install (reported)",
    ]
    assert all(s.name.startswith(("retire: ", "keep: ")) for s in _retire(site, "spark1"))


def test_dkms_builds_parser() -> None:
    lines = ["uvm-memory-saver/0.4.2, 7.0.0-1019-nvidia-64k, aarch64: installed",
             "uvm-memory-saver/0.4.20, 6.17.0-1032-nvidia, aarch64: built",
             "other/1.0: added", "uvm-memory-saver/0.4.2: added"]
    entries = parse_dkms_status("\n".join(lines)).entries
    assert dkms_builds(entries, "uvm-memory-saver", "0.4.2") == ["7.0.0-1019-nvidia-64k", ""]
    assert dkms_builds((), "uvm-memory-saver", "0.4.2") == []


def test_plan_shows_deferred_and_kept_notes_only_beside_changes(capsys: pytest.CaptureFixture[str]) -> None:
    deferred = OpResult("retire: kernel packages", "packages-retire", "unchanged", "deferred: running X")
    kept = OpResult("keep: MOK", "mok-kept", "unchanged", "kept: MOK de:68… stays enrolled")
    quiet = OpResult("retire: swap file /swapfile", "swap-retire", "unchanged", "no swap file /swapfile")
    change = OpResult("retire: purge libnccl2", "packages-retire", "would change")
    assert deferred.note and kept.note and not quiet.note and not change.note
    busy = NodeResult("spark2", SITE_BASELINE, NodeStatus.WOULD_CHANGE, [change, deferred, kept, quiet])
    calm = NodeResult("spark3", SITE_BASELINE, NodeStatus.UNCHANGED, [kept])
    print_report(Report("plan", [busy, calm]), as_json=False, details=True)
    out = capsys.readouterr().out
    assert "  ~ retire: purge libnccl2" in out
    assert "  . retire: kernel packages: deferred: running X" in out
    assert "  . keep: MOK: kept: MOK de:68… stays enrolled" in out
    assert "no swap file" not in out and "== spark3" not in out
