"""The fact script's text is the registry's order (`facts/areas.py`): the same plan gives
the same bytes, whatever module an area's reads live in.

Golden sha256 of the script for the shipped baselines' audit and deploy plans (spark1, the
shipped site), a core-only plan and a plan asking every optional read. A change here changes
what every node is asked: when it is meant (a read added or changed, a shipped baseline
changed), replace the hashes with the ones the failure prints and say why in the commit.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
from lab_mok_pair import lab_mok_dir

from sparkbase.audit.expected import expected_for
from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.reads import fact_plan
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.areas import build_script
from sparkbase.facts.script import FactPlan
from sparkbase.model.site import Site, load_site

REPO = Path(__file__).resolve().parents[2]
GOLDEN = {
    "audit ds41f-7x-64k": "58d0d6c8f3c14af231483e848bad6adb64d981addd6b36eca41dce178c108fd0",
    "audit ds41f-stock-pages-262k": "8c741a643cca1abdf38223efd4c418f5084b40411551285e69bb5bbcef4786da",
    "audit site-stock-6.17-4k": "78237185cc993c32d14e09d6ae1f5c927605d00a81092361739dc088c1706e77",
    "deploy ds41f-7x-64k": "74d365a468b02d16ca1f87407871cb19de3cc388126b23c3110a2b0489c86bc5",
    "deploy ds41f-stock-pages-262k": "fef5e4c66c4b03fd1fcf5a2188cee7a0877e363edb3b75d48d8dba923e805f46",
    "deploy site-stock-6.17-4k": "ec04fffb70dafa1f18f6c58b7f9b69e6cc2d587ddd27f7c4be1959d9bebf21a2",
    "core": "247acf99f58a4b906aa4bd6a081edf318d0310d1de2dc43b62f120d6c6f87b48",
    "every read": "1e7890cf669e133a9b51d18eca0a2829ab66e08a8a731f4e2764330bb93d71ea",
}


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


def _plans(site: Site) -> dict[str, FactPlan]:
    names = [name for name in site.baselines if name not in site.abstract_baselines]
    mok = MokFiles.from_dir(lab_mok_dir())
    plans = {f"audit {name}": expected_for(site, "spark1", name).plan() for name in names}
    plans |= {f"deploy {name}": fact_plan(build_steps(with_assignment(site, ["spark1"], name), "spark1", mok))
              for name in names}
    plans["core"] = FactPlan(core_only=True)
    plans["every read"] = replace(
        plans[f"audit {names[0]}"], gid_tables=True, netplan_files=True, efi_boot=True, drm_drivers=True,
        console_mode=True, watchdog=True, serving_matches=("vllm serve",), serving_containers=("vllm",),
        gpu_probe=("python3", "-c", "x"), dkms_status=True, held=True, swapon=True,
        memory_saver_module="nvidia_uvm", fan_module="fan", swap_paths=("/swap.img",),
        swap_files=("/swap.img",), ownership=True, staged_path="/x/staged", file_states=("/a",),
        file_texts=("/b",), newer=(("/a", "/b"),), need_reload=("x.service",),
        kernel_modinfo=(("6.1", "m"),), dkms_sources=(("n", "1"),), initramfs=(("6.1", "/p"),),
        dir_entries=("/d",), slice_unit="s.slice")
    return plans


def test_the_script_text_is_the_golden_one(site: Site) -> None:
    plans = _plans(site)
    found = {name: hashlib.sha256(build_script(plan).encode()).hexdigest() for name, plan in plans.items()}
    assert found == GOLDEN

