"""Fan control as the recipe has it (a signed DKMS module, its modules-load.d entry, its
daemon) and nvidia-drm modeset by purging DGX OS's options package (recorded, put back)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_audit_support import shipped

from sparkbase.deploy.areas.dkms import DkmsInstall, DkmsRetire
from sparkbase.deploy.areas.files import File, FileRetire
from sparkbase.deploy.areas.host import ModesetPurge, ModesetRestore
from sparkbase.deploy.areas.units import UnitEnabled
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.operations.host import UPDATE_INITRAMFS, decide_modeset_purge, decide_modeset_restore
from sparkbase.deploy.operations.packages import APT_INSTALL
from sparkbase.deploy.retire import decide_file_retire
from sparkbase.deploy.steps import build_steps
from sparkbase.model.ownership import Kind, OwnershipRecord, created
from sparkbase.model.site import Site
from sparkbase.render import render_baseline
from sparkbase_lab.shims.cmd_kernel import initrd_text

VARIANT = "ds41f-7x-64k"
STOCK_PAGES = "ds41f-stock-pages-262k"
SITE_BASELINE = "site-stock-6.17-4k"
PURGE = "nvidia-drm-options-modeset0"
MODULES_LOAD = "/etc/modules-load.d/dgx_ec_fan_control.conf"
LAB_MOK = MokFiles(Path(__file__), Path(__file__))  # any existing files: only their paths are used


@pytest.fixture(scope="module")
def site() -> Site:
    return shipped()


@pytest.mark.parametrize("name", [VARIANT, STOCK_PAGES])
def test_the_variants_carry_the_recipes_fan_control_and_purge(site: Site, name: str) -> None:
    """ds41f docs/setup.md (cff464c6), the fan repository's dkms.conf (d19178a0) and unit
    (99cca898), the fleet's DKMS 0.1.3 (dgx1-trial-inventory.json, 24b8aafc); the recipe's
    doctor wants the same on the 4 KiB kernel (tests/test_doctor.py, d3c3a45f)."""
    baseline = site.baselines[name]
    fan = baseline.host.fan_control
    assert fan is not None
    assert (fan.dkms_name, fan.dkms_version, fan.module, fan.service) == (
        "dgx-spark-fan-control", "0.1.3", "dgx_ec_fan_control", "dgx-fan-control.service")
    assert fan.modules_load_path == MODULES_LOAD
    assert baseline.host.nvidia_drm.purge == PURGE and baseline.host.nvidia_drm.modeset
    sources = site.baselines[VARIANT].sources
    assert sources["host.fan_control.dkms_version"].kind == "recipe"
    assert sources["host.nvidia_drm.purge"].kind == "recipe"


def test_the_site_baseline_has_neither(site: Site) -> None:
    host = site.baselines[SITE_BASELINE].host
    assert host.fan_control is None and host.nvidia_drm.purge is None and not host.nvidia_drm.modeset


def test_modules_load_entry_is_rendered_for_the_fan_module_only(site: Site) -> None:
    files = {f.path: f for f in render_baseline(VARIANT, site.baselines[VARIANT])}
    entry = files[MODULES_LOAD]
    assert entry.content.splitlines()[-1] == "dgx_ec_fan_control" and entry.needs_reboot
    assert not any(p.startswith("/etc/modules-load.d/")
                   for p in (f.path for f in render_baseline(SITE_BASELINE, site.baselines[SITE_BASELINE])))


def _kinds(steps: list[Any]) -> list[str]:
    return [s.kind for s in steps]


def test_variant_steps_sign_both_modules_then_purge_after_the_files(site: Site) -> None:
    from sparkbase.deploy.assign import with_assignment

    steps = build_steps(with_assignment(site, ["spark1"], VARIANT), "spark1", LAB_MOK)
    dkms = [(s.reboot, s.args) for s in steps if isinstance(s.args, DkmsInstall)]
    assert [args.dkms_name for _, args in dkms] == ["dgx-spark-memory-saver", "dgx-spark-fan-control"]
    assert all(reboot and args.baseline == VARIANT for reboot, args in dkms)
    kinds = _kinds(steps)
    purge = steps[kinds.index("modeset-purge")]
    assert purge.args == ModesetPurge(package=PURGE, baseline=VARIANT) and purge.reboot
    stamp = "/etc/sparkbase/stamp.json"
    last_file = max(i for i, s in enumerate(steps) if isinstance(s.args, File) and s.args.path != stamp)
    assert last_file < kinds.index("modeset-purge") < kinds.index("initramfs-update")
    assert steps[kinds.index("initramfs-update")].after_change_of == "/etc/modprobe.d/sparkbase.conf"
    assert "modeset-restore" not in kinds and "file-retire" not in kinds
    enabled = [s.args.unit for s in steps if isinstance(s.args, UnitEnabled) and s.section == "host"]
    assert enabled == ["dgx-fan-control.service"]


def test_stock_pages_signs_the_fan_module_without_a_memory_saver(site: Site) -> None:
    from sparkbase.deploy.assign import with_assignment

    steps = build_steps(with_assignment(site, ["spark1"], STOCK_PAGES), "spark1", LAB_MOK)
    assert [s.args.dkms_name for s in steps if isinstance(s.args, DkmsInstall)] == ["dgx-spark-fan-control"]
    assert "mok-import" in _kinds(steps)


def test_moving_back_to_the_site_retires_fan_control_and_restores_the_override(site: Site) -> None:
    steps = build_steps(site, "spark1", LAB_MOK)
    kinds = _kinds(steps)
    retire = steps[kinds.index("file-retire")]
    assert retire.args == FileRetire(path=MODULES_LOAD)
    assert DkmsRetire(dkms_name="dgx-spark-fan-control", version="0.1.3") in [s.args for s in steps]
    restore = steps[kinds.index("modeset-restore")]
    assert restore.args == ModesetRestore(package=PURGE) and restore.reboot
    assert kinds.index("unit-retire") < kinds.index("dkms-retire") < kinds.index("file")
    assert kinds.index("modeset-restore") < kinds.index("initramfs-update")
    assert "modeset-purge" not in kinds and "dkms-install" not in kinds


def _record(*items: Any) -> OwnershipRecord:
    return OwnershipRecord(items=tuple(items))


PURGED = created(Kind.PURGED, PURGE, VARIANT, "2026-12-01T00:00:00Z", version="25.07-1")

#: (name, installed, held, commands, reason contains)
APT_PURGE = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "-q", PURGE]
PURGE_CASES = [
    ("installed: purged, initramfs rebuilt", {PURGE: ["25.07-1"]}, [], [APT_PURGE, UPDATE_INITRAMFS], ""),
    ("held: unheld first", {PURGE: ["25.07-1"]}, [PURGE],
     [["apt-mark", "unhold", PURGE], APT_PURGE, UPDATE_INITRAMFS], ""),
    ("absent: nothing to do", {}, [], [], "is not installed"),
]


@pytest.mark.parametrize(("name", "installed", "held", "commands", "reason"), PURGE_CASES,
                         ids=[c[0] for c in PURGE_CASES])
def test_purge_decision(name: str, installed: dict[str, list[str]], held: list[str],
                        commands: list[list[str]], reason: str) -> None:
    decision = decide_modeset_purge(PURGE, installed, held)
    assert decision.commands == commands
    assert reason in decision.reason


#: (name, installed, record, commands, reason contains, forget)
RESTORE_CASES = [
    ("purged by sparkbase, still absent: the exact version back", {}, _record(PURGED),
     [[*APT_INSTALL, f"{PURGE}=25.07-1"], UPDATE_INITRAMFS], "", ((Kind.PURGED, PURGE),)),
    ("reinstalled by hand since: kept", {PURGE: ["25.08-1"]}, _record(PURGED), [],
     "kept: nvidia-drm-options-modeset0 25.08-1 was reinstalled since sparkbase purged 25.07-1", ()),
    ("never purged by sparkbase, installed (a factory node)", {PURGE: ["25.07-1"]}, _record(), [],
     "sparkbase did not purge it", ()),
    ("never purged by sparkbase, absent: not sparkbase's to install", {}, _record(), [],
     "is not installed; sparkbase did not purge it", ()),
]


@pytest.mark.parametrize(("name", "installed", "record", "commands", "reason", "forget"), RESTORE_CASES,
                         ids=[c[0] for c in RESTORE_CASES])
def test_restore_decision(name: str, installed: dict[str, list[str]], record: OwnershipRecord,
                          commands: list[list[str]], reason: str, forget: tuple[Any, ...]) -> None:
    decision = decide_modeset_restore(PURGE, installed, record)
    assert decision.commands == commands
    assert reason in decision.reason
    assert decision.forget == forget


WRITTEN = "a" * 64
WROTE = created(Kind.FILE, MODULES_LOAD, VARIANT, "t", sha256=WRITTEN)
FILE_CASES = [
    ("written by sparkbase, unchanged: deleted", WRITTEN, _record(WROTE),
     [["rm", "-f", "--", MODULES_LOAD]], ""),
    ("edited since", "b" * 64, _record(WROTE), [],
     f"kept: {MODULES_LOAD} changed since sparkbase created it"),
    ("someone else's", WRITTEN, _record(), [], f"kept: {MODULES_LOAD} not created by sparkbase"),
    ("absent", None, _record(), [], "no /etc/modules-load.d"),
]


@pytest.mark.parametrize(("name", "sha256", "record", "commands", "reason"), FILE_CASES,
                         ids=[c[0] for c in FILE_CASES])
def test_file_retire_decision(name: str, sha256: str | None, record: OwnershipRecord,
                              commands: list[list[str]], reason: str) -> None:
    decision = decide_file_retire(MODULES_LOAD, sha256, record)
    assert decision.commands == commands
    assert reason in decision.reason


def test_purged_items_round_trip_through_the_record() -> None:
    from sparkbase.model.ownership import parse_record

    record = _record(PURGED)
    assert parse_record(record.to_json()).find(Kind.PURGED, PURGE) == PURGED


def test_lab_initramfs_packs_the_nvidia_drm_options_it_was_built_with() -> None:
    """The override acts from the initramfs until it is rebuilt (why the recipe runs
    update-initramfs after the purge): the lab's image packs nvidia-drm's options only."""
    text = initrd_text("7.0.0-1019-nvidia-64k", "options nvidia_drm modeset=1 fbdev=1\n"
                       "options nvidia-drm modeset=0\noptions mlx5_core foo=1\n# options nvidia_drm x=1\n")
    assert "modprobe=options nvidia_drm modeset=1 fbdev=1" in text
    assert "modprobe=options nvidia-drm modeset=0" in text
    assert "mlx5_core" not in text and "x=1" not in text
