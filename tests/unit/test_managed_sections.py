"""`managed:` on a baseline: every step, file and check belongs to one section; a section left
as found is never written, retired or rebooted for, and its effective values are still judged.

Sites are the shipped one with `managed:` written into a baseline file, loaded as a user's.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from lab_mok_pair import lab_mok_dir
from test_audit_support import converged, converged_node

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import judge_node
from sparkbase.cli.main import main
from sparkbase.deploy.areas.dkms import DkmsInstall
from sparkbase.deploy.areas.files import File
from sparkbase.deploy.areas.packages import AptUpdate, Packages, PackagesRetire
from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.kinds import Step
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.reboot import reboot_reasons
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.model import NodeFacts
from sparkbase.model.sections import SECTIONS, Section
from sparkbase.model.site import Site, load_site
from sparkbase.policy.foreign import foreign_for
from sparkbase.release import export_nodes
from sparkbase.render import (
    NCCL_CONF_PATH,
    NETPLAN_PATH,
    STAMP_PATH,
    SYSCTL_PATH,
    baseline_digest,
    node_files,
)

REPO = Path(__file__).resolve().parents[2]
SITE_BASELINE = "site-stock-6.17-4k"
VARIANT = "ds41f-7x-64k"
STOCK_PAGES = "ds41f-stock-pages-262k"
LAB_MOK = MokFiles.from_dir(lab_mok_dir())
#: (node, baseline it is moved to or None, MOK pair): every concrete baseline on a node
ASSIGNMENTS = [("spark1", None, None), ("spark2", VARIANT, LAB_MOK), ("spark3", STOCK_PAGES, LAB_MOK)]
SiteWith = Callable[..., Site]


@pytest.fixture(scope="module")
def shipped() -> Site:
    return load_site(REPO)


@pytest.fixture(scope="module")
def site_with(tmp_path_factory: pytest.TempPathFactory) -> SiteWith:
    """`site_with({baseline: [sections], ...})`: the shipped site with those baselines' `managed:`."""

    def make(managed: dict[str, list[str]]) -> Site:
        root = tmp_path_factory.mktemp("site")
        for part in ("baselines", "inventory", "lanes"):
            shutil.copytree(REPO / part, root / part)
        for name, sections in managed.items():
            file = root / "baselines" / f"{name}.yaml"
            text = file.read_text()
            line = f"managed: [{', '.join(sections)}]\n"
            file.write_text(re.sub(r"^(version: .*\n)", rf"\1{line}", text, count=1, flags=re.M))
        return load_site(root)

    return make


def _steps(site: Site, node: str, baseline: str | None, mok: MokFiles | None) -> list[Step]:
    return build_steps(with_assignment(site, [node], baseline) if baseline else site, node, mok)


@pytest.mark.parametrize(("node", "baseline", "mok"), ASSIGNMENTS)
def test_every_step_of_the_shipped_baselines_belongs_to_one_section(
    shipped: Site, node: str, baseline: str | None, mok: MokFiles | None
) -> None:
    steps = _steps(shipped, node, baseline, mok)
    *sectioned, stamp = steps
    assert {step.kind for step in sectioned if step.section not in SECTIONS} == set()
    assert isinstance(stamp.args, File) and (stamp.args.path, stamp.section) == (STAMP_PATH, None)
    assert len({s.section for s in sectioned}) >= 6  # the mapping is really used, not one bucket


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize(("node", "baseline", "mok"), ASSIGNMENTS)
def test_one_managed_section_builds_exactly_its_steps(
    shipped: Site, site_with: SiteWith, section: Section, node: str, baseline: str | None,
    mok: MokFiles | None,
) -> None:
    name = baseline or SITE_BASELINE
    everything = _steps(shipped, node, baseline, mok)
    alone = _steps(site_with({name: [section]}), node, baseline, mok)
    # apt-get update runs once, with the first managed section's packages
    own = [(s.kind, s.name) for s in everything if s.section == section and s.kind != "apt-update"]
    assert [(s.kind, s.name) for s in alone if s.section == section and s.kind != "apt-update"] == own
    assert {s.section for s in alone} <= {section, None}
    assert [s.kind for s in alone if s.section is None] == ["file"]  # the stamp, last
    assert isinstance(alone[-1].args, File) and alone[-1].args.path == STAMP_PATH
    pins = shipped.baselines[name].pins_by_section().get(section, [])
    assert [s.args.pins for s in alone if isinstance(s.args, AptUpdate)] == (
        [[f"{p.name}={p.version}" for p in pins]] if pins else [])


def test_a_baseline_that_manages_nothing_builds_renders_and_reboots_nothing(site_with: SiteWith) -> None:
    site = site_with({SITE_BASELINE: []})
    baseline = site.baselines[SITE_BASELINE]
    assert baseline.unmanaged() == list(SECTIONS)
    assert build_steps(site, "spark1") == []
    assert node_files(site, "spark1") == []  # not even the stamp: sparkbase writes nothing
    # a node far from the baseline (factory kernel, no module options, a MOK enrolment
    # pending): nothing sparkbase would change, so no reboot
    boot = {"kernel": "6.17.0-1008-nvidia", "page_size": 65536, "cmdline": ["quiet", "splash"],
            "modules": ["nvidia_drm"], "drm_modeset": "Y", "drm_fbdev": "Y", "staged": []}
    mok = {"pending": [baseline.secure_boot.mok_fingerprint]}
    assert reboot_reasons(baseline, boot, mok, []) == []
    managed = load_site(REPO).baselines[SITE_BASELINE]
    assert reboot_reasons(managed, boot, mok, []) != []


def test_nothing_is_retired_in_a_section_either_baseline_leaves_as_found(
    shipped: Site, site_with: SiteWith
) -> None:
    retired = {s.kind for s in build_steps(shipped, "spark1") if s.name.startswith(("retire: ", "keep: "))}
    assert retired >= {"packages-retire", "dkms-retire", "unit-retire", "swap-retire", "mok-dir-retire"}
    # the other baselines manage nothing: they put nothing on a node that spark1 could retire
    quiet = site_with({VARIANT: [], STOCK_PAGES: []})
    foreign = foreign_for(quiet, SITE_BASELINE)
    assert foreign == replace(foreign, pins=(), services=(), dkms=(), mok_dirs=(), files=(), restore=(),
                              boot_swap=())
    assert not [s for s in build_steps(quiet, "spark1") if s.name.startswith(("retire: ", "keep: "))]
    # spark1's baseline manages memory only: only memory is retired (the variant's swap file,
    # fstab edit, boot swap unit and its files, memory-saver build and package), nothing of
    # the kernel, host or Secure Boot
    memory = site_with({SITE_BASELINE: ["memory"]})
    kinds = {(s.kind, s.section) for s in build_steps(memory, "spark1") if s.name.startswith("retire: ")}
    assert kinds == {("swap-retire", "memory"), ("factory-swap-restore", "memory"),
                     ("unit-retire", "memory"), ("file-retire", "memory"),
                     ("dkms-retire", "memory"), ("packages-retire", "memory")}


def test_a_managed_section_signs_its_module_with_the_key_the_site_keeps(site_with: SiteWith) -> None:
    """The variant's memory saver managed, Secure Boot as found: no MOK pair is uploaded (none
    is needed to build the steps), the build still signs against the pinned or found key."""
    site = with_assignment(site_with({VARIANT: ["memory"]}), ["spark2"], VARIANT)
    steps = build_steps(site, "spark2", None)
    assert [s.kind for s in steps if s.kind in ("directory", "upload", "mok-import")] == []
    assert [s.args.module for s in steps if isinstance(s.args, DkmsInstall)] == ["nvidia_uvm"]


def _judged(site: Site, drift: Callable[[NodeFacts], NodeFacts] | None = None
            ) -> dict[str, tuple[str, str | None]]:
    """Each check's status and fix on spark1, a node converged by sparkbase (then drifted)."""
    expected = expected_for(site, "spark1")
    facts = converged(expected_for(load_site(REPO), "spark1"))
    if drift is not None:
        facts = drift(facts)
    return {r.id: (r.status, r.fix) for r in judge_node(expected, facts)}


def _drift(conf: str | None = None) -> Callable[[NodeFacts], NodeFacts]:
    """Someone rewrote /etc/nccl.conf (as `conf`) and set vm.min_free_kbytes live."""
    return lambda f: replace(f, nccl_conf=conf or f.nccl_conf,
                             sysctls={**f.sysctls, "vm.min_free_kbytes": "1"},
                             file_sha256={**f.file_sha256, NCCL_CONF_PATH: "0" * 64})


def test_the_audit_of_an_unmanaged_baseline_judges_values_not_sparkbases_files(site_with: SiteWith) -> None:
    site = site_with({SITE_BASELINE: []})
    results = _judged(site)
    assert [check for check, (status, _) in results.items() if status == "fail"] == []
    for written in ("nccl.conf", "fabric.netplan", "stamp", "stamp.assignment"):
        assert results[written][0] == "skip"
    assert not [check for check in results if check.startswith("file.")]
    effective = ("kernel.release", "nccl.library", "sysctl.vm.min_free_kbytes", "fabric.link.enp1s0f0np0")
    assert {results[check][0] for check in effective} == {"pass"}
    # someone rewrites /etc/nccl.conf and the live sysctl: only the effective value fails,
    # with a fix by hand (apply changes nothing there)
    drifted = _judged(site, _drift("NCCL_IB_MERGE_NICS=0\n# the operator's own file\n"))
    assert [check for check, (status, _) in drifted.items() if status == "fail"] == [
        "sysctl.vm.min_free_kbytes"]
    fix = drifted["sysctl.vm.min_free_kbytes"][1] or ""
    assert fix.startswith("as found: memory is not in the baseline's managed:, so apply changes nothing")
    # the same drift on the managed baseline: both fail, and apply is the fix
    managed = _judged(load_site(REPO), _drift())
    assert managed["nccl.conf"][0] == managed["sysctl.vm.min_free_kbytes"][0] == "fail"
    assert "as found" not in (managed["sysctl.vm.min_free_kbytes"][1] or "")


def test_a_partly_managed_baseline_judges_only_its_managed_files(site_with: SiteWith) -> None:
    site = site_with({SITE_BASELINE: ["memory", "fabric"]})
    expected = expected_for(site, "spark1")
    assert [f.path for f in expected.files] == [NETPLAN_PATH, SYSCTL_PATH, STAMP_PATH]
    results = _judged(site)
    assert results["nccl.conf"][0] == "skip" and results["fabric.netplan"][0] == "pass"
    assert results[f"file.{SYSCTL_PATH}"][0] == "pass"
    assert results["stamp"][0] == "fail"  # the node carries the stamp of the fully managed baseline


def test_render_writes_nothing_for_an_unmanaged_node_and_renders_it_again(
    site_with: SiteWith, tmp_path: Path
) -> None:
    site = site_with({SITE_BASELINE: []})
    out = tmp_path / "out"
    assert export_nodes(site, ["spark1", "spark2"], out) == {"spark1": [], "spark2": []}
    assert sorted(p.name for p in out.iterdir()) == ["spark1", "spark2"]
    assert export_nodes(site, ["spark1"], out) == {"spark1": []}  # an empty render is replaced
    (out / "spark2" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        export_nodes(site, ["spark2"], out)


def test_render_says_which_sections_are_not_rendered(
    site_with: SiteWith, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = site_with({SITE_BASELINE: ["memory", "fabric"]})
    assert main(["render", "spark1", "--site", str(site.root), "--out", str(tmp_path / "out")]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("spark1: 3 file(s) under ")  # the netplan, the sysctl file, the stamp
    assert line.endswith("; not rendered (as found, not managed: kernel, driver, nccl, secure_boot, host, "
                         "cpuset)")
    rendered = sorted(str(p.relative_to(tmp_path / "out" / "spark1")) for p in (tmp_path / "out").rglob("*")
                      if p.is_file())
    assert rendered == ["etc/netplan/60-sparkbase-fabric.yaml", "etc/sparkbase/stamp.json",
                        "etc/sysctl.d/90-sparkbase.conf"]


def test_a_site_provided_library_is_checked_never_pinned(site_with: SiteWith, site_copy: Path) -> None:
    file = site_copy / "baselines" / f"{SITE_BASELINE}.yaml"
    text = file.read_text()
    text = re.sub(r"  library:\n    package: .*\n    version: .*\n", "  library:\n    provided_by: site\n",
                  text)
    file.write_text(text)
    # the variant as an older site had it: NCCL from a Debian package on the host (the
    # recipe's is built into its image, which pins no host package)
    variant_file = site_copy / "baselines" / f"{VARIANT}.yaml"
    variant_file.write_text(variant_file.read_text().replace(
        "    provided_by: image\n    version: 2.30.7\n",
        "    package: libnccl2\n    version: 2.28.9-1+cuda13.0\n"
        "    path: /usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9\n    sha256: " + "b" * 64 + "\n").replace(
        "{name: libnccl2, section: nccl}", "{name: libnccl2-dev, section: nccl}"))
    site = load_site(site_copy)
    library = site.baselines[SITE_BASELINE].nccl.library
    assert (library.provided_by, library.package, library.pin()) == ("site", None, None)
    steps = build_steps(site, "spark1")
    pinned = [pin for s in steps if isinstance(s.args, Packages) for pin in s.args.pins]
    assert pinned and not [pin for pin in pinned if pin.startswith("nccl-site-ring4=")]
    assert "nccl" not in {s.section for s in steps if s.kind in ("packages", "hold")}
    # a library another baseline installs from a package is that baseline's to retire, unless
    # that package ships the very file this baseline takes as the site's (the variant's own
    # site-ring4 package at the same path: purging it would delete the library lanes load)
    retired = [s.args.names for s in steps if isinstance(s.args, PackagesRetire) and s.section == "nccl"]
    assert retired == [["libnccl2"]]
    variant = site.baselines[STOCK_PAGES].nccl.library
    assert (variant.package, variant.path) == ("libnccl2", "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9")
    assert variant.path is not None and library.path is not None
    file = site_copy / "baselines" / f"{SITE_BASELINE}.yaml"
    file.write_text(file.read_text().replace("/opt/nccl-site/lib/libnccl.so.2.27.7", variant.path))
    same_path = build_steps(load_site(site_copy), "spark1")
    assert not [s for s in same_path if s.kind == "packages-retire" and s.section == "nccl"]
    expected, facts = converged_node(site, "spark1")
    results = {r.id: r for r in judge_node(expected, facts)}
    assert results["nccl.library"].status == "pass"
    assert "package.nccl-site-ring4" not in results
    moved = replace(facts, file_sha256={**facts.file_sha256, library.path: "1" * 64})
    failed = {r.id: r for r in judge_node(expected, moved)}["nccl.library"]
    assert failed.status == "fail"
    assert failed.fix is not None and failed.fix.startswith("the site provides this file (provided_by: site)")
    assert "apt" not in failed.fix and "install" not in failed.fix


def test_the_digest_moves_only_when_a_baseline_uses_managed(shipped: Site, site_with: SiteWith) -> None:
    """A baseline that says every section (in any order) keeps the digest its lock records."""
    def digest(site: Site) -> str:
        return baseline_digest(SITE_BASELINE, site.baselines[SITE_BASELINE])

    shipped_digest = digest(shipped)
    assert digest(site_with({SITE_BASELINE: list(reversed(SECTIONS))})) == shipped_digest
    nothing = digest(site_with({SITE_BASELINE: []}))
    assert nothing != shipped_digest
    assert digest(site_with({SITE_BASELINE: ["memory"]})) not in (shipped_digest, nothing)
