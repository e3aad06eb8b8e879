"""`sparkbase capture` of a converged lab node (this module's own one-node lab, port 2941,
spark1 cloned from the run's converged image), on the site baseline and then moved to the
variant (fallback kernel, factory swap noauto, fan control and the patched nvidia-uvm as
DKMS modules, the modeset package purged, governor and NVMe coalescing): each captured
baseline validates, renders the files the node was converged to, and audits the node clean
once apply has rewritten the stamp (the only file that names the baseline's own hash)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleets import ConvergedImage, clone_fleet, console_enrol
from ports import port_base

from sparkbase.cli.main import main
from sparkbase.model.site import load_site
from sparkbase.render import STAMP_PATH, node_files
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_CAPTURE_PORT_BASE", 2941)
NODE = "spark1"
BASELINE = "site-stock-6.17-4k"
VARIANT = "ds41f-7x-64k"
VARIANT_KERNEL = "7.0.0-1019-nvidia-64k"
#: what a capture of the site baseline marks (every field the node can tell)
SITE_CAPTURED = ("kernel.release", "kernel.tools", "driver.version", "nccl.library.sha256", "cpuset.cpus",
                 "memory.sysctls", "host.cpu_governor", "host.nvme.interrupt_coalescing")
#: what a capture of the variant marks beyond those
VARIANT_CAPTURED = (
    "kernel.fallback.release", "kernel.fallback.package_version", "memory.factory_swap.fstab",
    "memory.memory_saver.dkms_version", "memory.memory_saver.srcversion", "memory.memory_saver.packing",
    "host.nvidia_drm.purge", "host.fan_control.dkms_version", "host.fan_control.module",
    "host.fan_control.service", "memory.memory_saver.dkms_name", "memory.memory_saver.module",
    "host.fan_control.dkms_name",
)


def sparkbase(*argv: str) -> subprocess.CompletedProcess[str]:
    """A separate process: pyinfra patches the interpreter (gevent)."""
    return subprocess.run([sys.executable, "-m", "sparkbase.cli.main", *argv],
                          capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, site_copy: Path) -> Path:
    """This module's own copy of the site (capture rewrites one of its baselines)."""
    own = tmp_path_factory.mktemp("capture") / "site"
    shutil.copytree(site_copy, own)
    return own


@pytest.fixture(scope="module")
def converged(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage) -> Iterator[Lab]:
    """spark1 of the run's converged image (converged with the shipped site), alone."""
    yield from clone_fleet(converged_image, tmp_path_factory.mktemp("capture-lab"), PORT_BASE, nodes=1)


def audit_failures(site: Path, lab: Lab, capsys: pytest.CaptureFixture[str],
                   *baseline: str) -> tuple[int, set[str]]:
    code = main(["audit", "--site", str(site), "--lab-dir", str(lab.dir), "--limit", NODE,
                 "--format", "json", *(["--baseline", *baseline] if baseline else [])])
    data = json.loads(capsys.readouterr().out)
    return code, {c["id"] for n in data["nodes"] for c in n["checks"] if c["status"] in {"fail", "warn"}}


def test_capture_of_a_converged_node(converged: Lab, site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = site / "baselines" / f"{BASELINE}.yaml"
    before_text = file.read_text()
    before = {f.path: f.content for f in node_files(load_site(site), NODE)}

    code = main(["capture", NODE, "--site", str(site), "--lab-dir", str(converged.dir), "--as", BASELINE])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"capture {NODE}: updated" in out.out

    # validates, keeps the file's comments, marks what it read
    assert main(["validate", "--site", str(site)]) == 0
    capsys.readouterr()
    text = file.read_text()
    comments = [line.strip() for line in before_text.splitlines() if line.lstrip().startswith("#")]
    assert all(comment in text for comment in comments)
    captured = load_site(site).baselines[BASELINE]
    for key in SITE_CAPTURED:
        source = captured.sources[key]
        assert (source.kind, getattr(source, "node", None)) == ("captured", NODE), key

    # renders the same files; only the stamp's hash of the baseline itself may differ
    after = {f.path: f.content for f in node_files(load_site(site), NODE)}
    assert after.keys() == before.keys()
    assert {path for path in after if after[path] != before[path]} <= {STAMP_PATH}
    old_stamp, new_stamp = json.loads(before[STAMP_PATH]), json.loads(after[STAMP_PATH])
    assert {key for key in new_stamp if new_stamp[key] != old_stamp[key]} <= {"baseline_sha256"}

    # audits clean but for that hash, and clean once apply rewrote the stamp (no reboot)
    code, failures = audit_failures(site, converged, capsys)
    assert failures <= {"stamp"}
    result = sparkbase("apply", "--site", str(site), "--lab-dir", str(converged.dir), "--limit", NODE,
                       "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rebooting" not in result.stdout
    code, failures = audit_failures(site, converged, capsys)
    assert (code, failures) == (0, set())


def test_capture_of_a_node_converged_to_the_variant(
    converged: Lab, site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    console_enrol(converged, NODE)  # a person at the console enrols the MOK at the apply's reboot
    moved = sparkbase("apply", "--site", str(site), "--lab-dir", str(converged.dir), "--limit", NODE,
                      "--baseline", VARIANT, "--allow-reboot", "--yes",
                      "--override-policy", "e2e: capture of the variant")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    file = site / "baselines" / f"{VARIANT}.yaml"
    before_text = file.read_text()
    before = {f.path: f.content for f in node_files(load_site(site), NODE, VARIANT)}

    code = main(["capture", NODE, "--site", str(site), "--lab-dir", str(converged.dir), "--as", VARIANT])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "dropped" not in out.out, out.out  # the node carries out everything the variant pins
    assert main(["validate", "--site", str(site)]) == 0
    capsys.readouterr()
    text = file.read_text()
    comments = [line.strip() for line in before_text.splitlines() if line.lstrip().startswith("#")]
    assert all(comment in text for comment in comments)
    captured = load_site(site).baselines[VARIANT]
    assert captured.kernel.release == VARIANT_KERNEL
    assert captured.nccl.library.provided_by == "image"  # the variant's NCCL is the image's: no host file
    for key in (*(k for k in SITE_CAPTURED if not k.startswith("nccl.library")), *VARIANT_CAPTURED):
        source = captured.sources[key]
        assert (source.kind, getattr(source, "node", None)) == ("captured", NODE), key

    after = {f.path: f.content for f in node_files(load_site(site), NODE, VARIANT)}
    assert after.keys() == before.keys()
    assert {path for path in after if after[path] != before[path]} <= {STAMP_PATH}

    # the inventory still assigns the site baseline: the audit warns that the node carries another
    moved_away = {"stamp.assignment"}
    code, failures = audit_failures(site, converged, capsys, VARIANT)
    assert failures <= {"stamp", *moved_away}
    result = sparkbase("apply", "--site", str(site), "--lab-dir", str(converged.dir), "--limit", NODE,
                       "--baseline", VARIANT, "--yes", "--override-policy", "e2e: stamp of the capture")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rebooting" not in result.stdout
    code, failures = audit_failures(site, converged, capsys, VARIANT)
    assert (code, failures) == (0, moved_away)


def test_capture_refuses_an_unreachable_node(
    converged: Lab, site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = site / "baselines" / "captured-spark2.yaml"
    code = main(["capture", "spark2", "--site", str(site), "--lab-dir", str(converged.dir)])
    assert code == 3
    assert "spark2 unreachable" in capsys.readouterr().err
    assert not target.exists()
