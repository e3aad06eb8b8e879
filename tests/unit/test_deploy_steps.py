"""Operation building from a baseline: cases as data (input node + baseline -> steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_mok_pair import lab_mok_dir

from sparkbase.deploy.areas.dkms import DkmsInstall
from sparkbase.deploy.areas.files import File, Upload
from sparkbase.deploy.areas.packages import Hold, Packages
from sparkbase.deploy.assign import AssignmentError, breaches_by_baseline, with_assignment
from sparkbase.deploy.mok_keys import DeployConfigError, MokFiles
from sparkbase.deploy.steps import build_steps
from sparkbase.model.site import Site, load_site
from sparkbase.render import STAMP_PATH, node_files

REPO = Path(__file__).resolve().parents[2]
CASES = sorted((Path(__file__).parent / "deploy_cases").glob("*.json"))
LAB_MOK = MokFiles.from_dir(lab_mok_dir())


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_steps_from_baseline(site: Site, case_file: Path) -> None:
    case = json.loads(case_file.read_text())
    if case["baseline"]:
        site = with_assignment(site, [case["node"]], case["baseline"])
    steps = build_steps(site, case["node"], LAB_MOK if case["mok"] else None)
    assert [[s.kind, s.name] for s in steps] == case["steps"]


def test_every_rendered_file_is_put_byte_for_byte_and_the_stamp_last(site: Site) -> None:
    steps = build_steps(site, "spark1")
    files = [s.args for s in steps if isinstance(s.args, File)]
    rendered = node_files(site, "spark1")
    assert {f.path: (f.content, f.mode) for f in rendered} == {a.path: (a.content, a.mode) for a in files}
    assert steps[-1].args == files[-1] and files[-1].path == STAMP_PATH


def test_packages_are_the_baselines_pins_at_exact_versions(site: Site) -> None:
    steps = build_steps(site, "spark1")
    pins = [pin for s in steps if isinstance(s.args, Packages) for pin in s.args.pins]
    assert pins == [f"{p.name}={p.version}" for p in site.baseline_of("spark1").packages()]
    by_section = site.baseline_of("spark1").pins_by_section()
    assert [(s.section, s.args.pins) for s in steps if isinstance(s.args, Packages)] == [
        (section, [f"{p.name}={p.version}" for p in pins]) for section, pins in by_section.items()]
    assert [s.args.names for s in steps if isinstance(s.args, Hold)] == [
        [p.name for p in pins] for pins in by_section.values()]


def test_dkms_builds_for_the_target_kernel_before_files_and_reboot(site: Site) -> None:
    variant = with_assignment(site, ["spark2"], "ds41f-7x-64k")
    steps = build_steps(variant, "spark2", LAB_MOK)
    dkms = next(s for s in steps if s.kind == "dkms-install")
    assert isinstance(dkms.args, DkmsInstall) and dkms.args.kernel == "7.0.0-1019-nvidia-64k"
    assert dkms.reboot
    kinds = [s.kind for s in steps]
    assert kinds.index("mok-import") < kinds.index("dkms-install") < kinds.index("grub-update")


def test_private_key_step_is_secret_and_never_carries_content(site: Site) -> None:
    variant = with_assignment(site, ["spark2"], "ds41f-7x-64k")
    secret = [s for s in build_steps(variant, "spark2", LAB_MOK) if s.secret]
    assert [(type(s.args), s.args.mode) for s in secret if isinstance(s.args, Upload)] == [(Upload, 0o600)]
    assert len(secret) == 1 and "content" not in secret[0].args.as_dict()
    assert LAB_MOK.private_key.read_text()[:40] not in json.dumps(secret[0].summary())


def test_variant_without_mok_pair_is_a_config_error(site: Site, tmp_path: Path) -> None:
    variant = with_assignment(site, ["spark2"], "ds41f-7x-64k")
    with pytest.raises(DeployConfigError, match="--mok-dir"):
        build_steps(variant, "spark2", None)


def test_a_pinned_mok_refuses_another_certificate(site_copy: Path, tmp_path: Path) -> None:
    variant_file = site_copy / "baselines" / "ds41f-7x-64k.yaml"
    pin = ":".join(["ab"] * 20)
    pinned = variant_file.read_text().replace("mok_fingerprint: null", f'mok_fingerprint: "{pin}"')
    variant_file.write_text(pinned)
    variant = with_assignment(load_site(site_copy), ["spark2"], "ds41f-7x-64k")
    (tmp_path / "MOK.der").write_bytes(b"not the pinned certificate")
    (tmp_path / "MOK.priv").write_text("x")
    with pytest.raises(DeployConfigError, match="fingerprint"):
        build_steps(variant, "spark2", MokFiles.from_dir(tmp_path))


def test_assignment_moves_only_the_named_nodes_and_reports_breaches(site: Site) -> None:
    moved = with_assignment(site, ["spark2"], "ds41f-7x-64k")
    assert moved.inventory.nodes["spark2"].baseline == "ds41f-7x-64k"
    assert moved.inventory.nodes["spark1"].baseline == site.inventory.nodes["spark1"].baseline
    assert site.inventory.nodes["spark2"].baseline != "ds41f-7x-64k"  # the loaded site is untouched
    breaches = breaches_by_baseline(moved, ["spark1", "spark2"])
    assert list(breaches) == ["ds41f-7x-64k"]
    assert any("kernel" in b for b in breaches["ds41f-7x-64k"])
    assert breaches_by_baseline(site, ["spark1"]) == {}
    with pytest.raises(AssignmentError):
        with_assignment(site, ["spark2"], "spark-common")
    with pytest.raises(AssignmentError):
        with_assignment(site, ["spark2"], "nope")
