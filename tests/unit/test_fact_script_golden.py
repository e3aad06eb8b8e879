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
    "audit ds41f-7x-64k": "a78a319b720f04f7fb005bbdc20bc6d29ccd1894071bbb61710c0dcd16aacb62",
    "audit ds41f-stock-pages-262k": "81934dc262f5edfb8e02dce87a6a5855d87039673290166ac3241b8104fc7876",
    "audit site-stock-6.17-4k": "7a2509ca167b32de4927a43b9507f6d593e7caccae626e3f46ca7a0662450920",
    "deploy ds41f-7x-64k": "6d0e9e25af538a043b766e81ec1393d981182a71438c259ff2a67e8d7a121503",
    "deploy ds41f-stock-pages-262k": "546474f8441c241f0c86195a06c72faa864ec7bf5b59792371518e1d1fb3cba3",
    "deploy site-stock-6.17-4k": "fab7198f95a61bd2952de270f983c921f7e35e06fb7cd70e57bd8c59960edc2b",
    "core": "247acf99f58a4b906aa4bd6a081edf318d0310d1de2dc43b62f120d6c6f87b48",
    "every read": "57c217151a55fd27fc2b56500c2485bceee769d1c780fe343deae9814aaee53a",
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

