"""DKMS modules from their source checkout (issue 24.3): the baseline pins the repository,
the revision and the tarball's sha256, and the build inputs (NVIDIA's kernel source at the
driver's version); apply places the tree in /usr/src and registers it, recorded for move-back;
the lab serves the tarball beside its apt repository, byte-for-byte what the baseline pins."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from lab_mok_pair import lab_mok_dir

from sparkbase.deploy.areas.dkms import DkmsSource
from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.operations.dkms import decide_dkms_source, place_source_script
from sparkbase.deploy.sources import LAB_MIRROR, source_mirror
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.parsers.files import parse_dkms_source
from sparkbase.model.site import Site, load_site
from sparkbase_lab import packages

REPO = Path(__file__).resolve().parents[2]
VARIANT = "ds41f-7x-64k"
NAME, VERSION = "dgx-spark-memory-saver", "0.2.0"
TREE = f"/usr/src/{NAME}-{VERSION}"
SHA = "b48fc514c423bc8c378865f9574cbb8c5cebfdb34c7e81901b6a82c45fdb4eac"
URL = f"{LAB_MIRROR}/{NAME}-2dd6ef107616ef13f1c7f87817c07e5aabc9199e.tar.gz"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


def test_the_variant_pins_the_recipes_checkout_and_its_build_inputs(site: Site) -> None:
    baseline = site.baselines[VARIANT]
    saver = baseline.memory.memory_saver
    assert saver is not None
    assert saver.source.repository == "https://github.com/christopherowen/dgx-spark-memory-saver.git"
    assert saver.source.revision == "2dd6ef107616ef13f1c7f87817c07e5aabc9199e"
    memory = {pin.name: pin.version for pin in baseline.pins_by_section()["memory"]}
    assert memory == {"nvidia-kernel-source-580-open": baseline.driver.package_version}
    kernel = {pin.name for pin in baseline.pins_by_section()["kernel"]}
    assert f"linux-headers-{baseline.kernel.release}" in kernel
    assert "memory.memory_saver.source.sha256" in baseline.sources  # a placeholder that says so


def test_the_lab_serves_exactly_the_tarball_the_baseline_pins(site: Site) -> None:
    saver = site.baselines[VARIANT].memory.memory_saver
    assert saver is not None
    tarballs = packages.source_tarballs()
    name = saver.source.tarball(NAME)
    assert list(tarballs) == [name]
    assert hashlib.sha256(tarballs[name]).hexdigest() == saver.source.sha256
    assert packages.source_tarballs() == tarballs  # reproducible, byte for byte
    with tarfile.open(fileobj=io.BytesIO(tarballs[name])) as tar:
        names = tar.getnames()
        conf = tar.extractfile(f"{NAME}-{saver.source.revision}/dkms.conf")
        assert conf is not None
        text = conf.read().decode()
    assert all(n.startswith(f"{NAME}-{saver.source.revision}/") for n in names)  # one top directory
    assert 'PACKAGE_VERSION="0.2.0"' in text and "scripts/driver-build build-dkms" in text


def test_the_lab_carries_nvidias_kernel_source_at_each_drivers_version() -> None:
    found = {pkg.version: [f.path for f in pkg.files] for pkg in packages.CATALOGUE
             if pkg.name == "nvidia-kernel-source-580-open"}
    assert found["580.178.04-0ubuntu0.24.04.1"] == ["/usr/src/nvidia-580.178.04/Makefile"]


def test_the_source_step_comes_before_the_build_and_fetches_from_the_mirror(site: Site) -> None:
    variant = with_assignment(site, ["spark2"], VARIANT)
    mok = MokFiles.from_dir(lab_mok_dir())
    steps = build_steps(variant, "spark2", mok, LAB_MIRROR)
    kinds = [s.kind for s in steps]
    source = steps[kinds.index("dkms-source")]
    assert kinds.index("packages") < kinds.index("dkms-source") < kinds.index("dkms-install")
    assert source.args == DkmsSource(dkms_name=NAME, version=VERSION, url=URL, sha256=SHA, baseline=VARIANT)
    upstream = next(s.args for s in build_steps(variant, "spark2", mok) if isinstance(s.args, DkmsSource))
    assert upstream.url == ("https://github.com/christopherowen/dgx-spark-memory-saver/archive/"
                                    "2dd6ef107616ef13f1c7f87817c07e5aabc9199e.tar.gz")


def test_the_mirror_is_the_sites_else_the_labs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPARKBASE_DKMS_MIRROR", raising=False)
    assert source_mirror(None) is None
    assert source_mirror(tmp_path) == LAB_MIRROR
    monkeypatch.setenv("SPARKBASE_DKMS_MIRROR", "https://mirror.example/dkms")
    assert source_mirror(tmp_path) == "https://mirror.example/dkms"


def _state(present: bool, sha256: str | None, registered: bool) -> dict[str, Any]:
    return {"present": present, "sha256": sha256, "registered": registered}


@pytest.mark.parametrize(("state", "ours", "first", "reason"), [
    (_state(False, None, False), False, "sh", ""),
    (_state(True, SHA, True), True, None, f"{TREE} is the pinned checkout"),
    (_state(True, SHA, False), True, "dkms", f"register {TREE}"),
    (_state(True, None, True), False, None, f"kept: {TREE} was not placed by sparkbase"),
    (_state(True, "0" * 64, True), True, "dkms", f"{TREE} came from another tarball"),
])
def test_the_source_decision(state: dict[str, Any], ours: bool, first: str | None, reason: str) -> None:
    decision = decide_dkms_source(NAME, VERSION, URL, SHA, state, ours)
    assert (decision.commands[0][0] if decision.commands else None) == first
    assert decision.reason.startswith(reason)
    if first == "dkms" and state["sha256"] != SHA:  # replaced: removed from DKMS, then placed again
        assert [c[0] for c in decision.commands] == ["dkms", "rm", "sh"]


def test_the_placing_script_checks_the_sha256_before_it_unpacks() -> None:
    script = place_source_script(NAME, VERSION, URL, SHA)
    parts = script.split("; ")
    check = next(i for i, part in enumerate(parts) if "sha256sum -c" in part)
    unpack = next(i for i, part in enumerate(parts) if part.startswith("tar -xzf"))
    move = next(i for i, part in enumerate(parts) if part.startswith("mv "))
    assert parts[0] == "set -e" and check < unpack < move
    assert parts[-1] == f"dkms add -m {NAME} -v {VERSION}"
    assert f"mv \"$t/tree\" {TREE}" in parts


def test_the_fact_reads_tree_stamp_and_registration() -> None:
    assert parse_dkms_source("", False) == _state(False, None, False)
    assert parse_dkms_source("tree present\n", False) == _state(True, None, False)
    assert parse_dkms_source(f"tree present\nstamp {SHA}\n", True) == \
        _state(True, SHA, True)
