"""The variant's memory saver as the spark-ds41f recipe has it: a patched nvidia-uvm
(values and sources in docs/sources/ds41f-research.md, "Memory saver")."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbase.model.site import load_site
from sparkbase.render import render_baseline
from sparkbase_lab.shims import modfile

SITE = Path(__file__).resolve().parents[2]
VARIANT = "ds41f-7x-64k"

#: field -> (recipe value, the recipe file that gives it)
RECIPE = {
    "dkms_name": ("dgx-spark-memory-saver", "config/kernel-trial.json"),
    "dkms_version": ("0.2.0", "config/kernel-trial.json"),
    "srcversion": ("34683B82C2D3339BBD2EEC9", "config/kernel-trial.json"),
    "module": ("nvidia_uvm", "experiments/2026-10-02-memory-saver-capacity/runs/install-dgx1.log"),
    "packing_parameter": ("uvm_pack_sysmem_leaf_tables", "docs/setup.md"),
    "packing": (True, "docs/setup.md"),
}


@pytest.mark.parametrize("field", sorted(RECIPE))
def test_the_variant_pins_the_recipes_saver(field: str) -> None:
    site = load_site(SITE)
    baseline = site.baselines[VARIANT]
    saver = baseline.memory.memory_saver
    assert saver is not None and saver.required
    value, file = RECIPE[field]
    assert getattr(saver, field) == value
    source = baseline.sources.get(f"memory.memory_saver.{field}") or baseline.sources["memory.memory_saver"]
    assert source.kind == "recipe" and source.file == file


def test_no_modprobe_option_for_the_saver() -> None:
    """The stock nvidia-uvm (the 4 KiB fallback's) refuses the option: none is rendered."""
    baseline = load_site(SITE).baselines[VARIANT]
    rendered = "".join(f.content for f in render_baseline(VARIANT, baseline))
    assert "uvm_pack_sysmem_leaf_tables" not in rendered and "options nvidia_uvm" not in rendered


@pytest.mark.parametrize(
    ("initial", "kind", "shown"),
    [("true", "bool", "Y"), ("false", "bool", "N"), ("1", "bool", "Y"), ("4", "int", "4")],
)
def test_lab_parameter_initial_values_as_sysfs_shows_them(initial: str, kind: str, shown: str) -> None:
    assert modfile.sysfs_value(initial, kind) == shown


def test_lab_default_lines_are_not_printed_by_modinfo(tmp_path: Path) -> None:
    ko = tmp_path / "nvidia-uvm.ko"
    ko.write_text(f"{modfile.MAGIC}\nversion=0.2.0\nparm=uvm_pack_sysmem_leaf_tables:bool\n"
                  f"{modfile.LAB_DEFAULT}=uvm_pack_sysmem_leaf_tables=Y\n")
    assert modfile.param_defaults(str(ko)) == {"uvm_pack_sysmem_leaf_tables": "Y"}
    assert modfile.LAB_DEFAULT not in {key for key, _ in modfile.fields(str(ko))}


#: memory policy: (dotted field, recipe value, the recipe file that gives it)
POLICY = [
    ("memory.sysctls.vm.min_free_kbytes", 45166, "host/kernel-memory/spark3-kernel-memory"),
    ("memory.swap.path", "/swap-64k.img", "experiments/2026-10-02-kernel-64k/install-boot-support.sh"),
]


@pytest.mark.parametrize(("key", "value", "file"), POLICY)
def test_the_variant_pins_the_recipes_memory_policy(key: str, value: object, file: str) -> None:
    baseline = load_site(SITE).baselines[VARIANT]
    swap = baseline.memory.swap
    found = {
        "memory.sysctls.vm.min_free_kbytes": baseline.memory.sysctls.get("vm.min_free_kbytes"),
        "memory.swap.path": swap.path if swap is not None else None,
    }[key]
    assert str(found) == str(value)
    source = baseline.sources[key]
    assert source.kind == "recipe" and source.file == file
