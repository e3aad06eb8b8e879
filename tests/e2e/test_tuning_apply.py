"""End to end: DGX OS's tuning units on the lab (issue 12): the CPU governor and NVMe
interrupt coalescing, applied, audited, and undone on move-back.

One module-scoped factory-fresh fleet (own lab dir and ports), in file order:

- the factory node as DGX OS ships it: nv-cpu-governor ran cpupower (performance on every
  CPU), the coalescing unit set feature 0x08 to 0x107; without linux-tools for the running
  kernel the governor unit fails, printing what Ubuntu's wrapper prints;
- spark2 goes to the variant (coalescing off): the unit is masked, the feature 0, the mask
  recorded; every CPU runs performance on the 64 KiB kernel (its linux-tools pinned);
- spark2 moves back to the site: the mask is undone (the unit enabled again), 0x107;
- spark3 carries a mask someone else made: the site's apply keeps it and says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase.facts.parsers.host import parse_governors, parse_nvme_feature
from sparkbase.model.host import GOVERNOR_UNIT, NVME_COALESCING_UNIT
from sparkbase.model.ownership import OWNERSHIP_PATH, Kind, parse_record

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_TUNING_PORT_BASE", 3011)
VARIANT = "ds41f-7x-64k"
TUNING_CHECKS = ("host.governor", "host.governor_unit", "host.nvme_coalescing")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[fleets.Fleet]:
    yield from fleets.fleet_for_module(tmp_path_factory, "tuning", PORT_BASE)


def _coalescing(fleet: fleets.Fleet, node: str) -> int:
    return parse_nvme_feature(fleet.sh(node, "nvme get-feature /dev/nvme0 -f 8"), 8)


def _governors(fleet: fleets.Fleet, node: str) -> set[str]:
    text = fleet.sh(node, "grep -aH '' /sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")
    return set(parse_governors(text).values())


def _unit(fleet: fleets.Fleet, node: str, unit: str) -> str:
    return fleet.sh(node, f"systemctl show -p UnitFileState -p ActiveState {unit}").strip()


def _apply(fleet: fleets.Fleet, node: str, *extra: str) -> dict[str, dict[str, Any]]:
    fleet.console(node)  # a person at the console enrols a pending MOK at the reboot
    done = fleet.sparkbase("apply", "--limit", node, "--allow-reboot", "--yes", "--json", *extra)
    report = json.loads(done.stdout)
    assert report["nodes"][0]["status"] in ("changed", "unchanged"), done.stdout + done.stderr
    return {op["name"]: op for op in report["nodes"][0]["operations"]}


def _tuning_checks(fleet: fleets.Fleet, node: str, *extra: str) -> dict[str, str]:
    done = fleet.sparkbase("audit", "--limit", node, "--format", "json", *extra)
    checks = json.loads(done.stdout)["nodes"][0]["checks"]
    return {c["id"]: c["status"] for c in checks if c["id"] in TUNING_CHECKS}


def test_factory_node_runs_dgx_os_tuning_units(fleet: fleets.Fleet) -> None:
    assert _governors(fleet, "spark1") == {"performance"}
    assert _coalescing(fleet, "spark1") == 0x107
    assert "UnitFileState=enabled" in _unit(fleet, "spark1", NVME_COALESCING_UNIT)
    assert "ActiveState=active" in _unit(fleet, "spark1", NVME_COALESCING_UNIT)


def test_governor_unit_fails_without_linux_tools_for_the_running_kernel(fleet: fleets.Fleet) -> None:
    release = fleet.sh("spark4", "uname -r").strip()
    fleet.sh("spark4", f"dpkg -r linux-tools-{release} >/dev/null")
    status, _, err = fleet.lab.run("spark4", "cpupower frequency-set -g performance")
    assert status == 2
    assert err.startswith(f"WARNING: cpupower not found for kernel {'-'.join(release.split('-')[:2])}\n")
    assert f"    linux-tools-{release}\n" in err
    fleet.lab.run("spark4", f"systemctl restart {GOVERNOR_UNIT}")
    assert "ActiveState=failed" in _unit(fleet, "spark4", GOVERNOR_UNIT)


def test_variant_masks_coalescing_and_records_it(fleet: fleets.Fleet) -> None:
    ops = _apply(fleet, "spark2", "--baseline", VARIANT, "--override-policy", "e2e: tuning on the variant")
    assert any(name.startswith("NVMe interrupt coalescing off") for name in ops)
    assert _coalescing(fleet, "spark2") == 0
    # nvme-cli prints a zero value without 0x, as on a real Spark
    assert fleet.sh("spark2", "nvme get-feature /dev/nvme0 -f 8").strip().endswith("Current value:00000000")
    assert "UnitFileState=masked" in _unit(fleet, "spark2", NVME_COALESCING_UNIT)
    mask = parse_record(fleet.sh("spark2", f"cat {OWNERSHIP_PATH}")).find(Kind.MASK, NVME_COALESCING_UNIT)
    assert mask is not None and mask.original == "enabled" and mask.baseline == VARIANT
    assert fleet.sh("spark2", "uname -r").strip() == "7.0.0-1019-nvidia-64k"
    assert _governors(fleet, "spark2") == {"performance"}
    assert _tuning_checks(fleet, "spark2", "--baseline", VARIANT) == dict.fromkeys(TUNING_CHECKS, "pass")
    # a reboot keeps it off: the masked unit cannot run
    fleet.lab.reboot("spark2")
    assert _coalescing(fleet, "spark2") == 0


def test_move_back_undoes_the_recorded_mask(fleet: fleets.Fleet) -> None:
    _apply(fleet, "spark2")
    assert "UnitFileState=enabled" in _unit(fleet, "spark2", NVME_COALESCING_UNIT)
    assert _coalescing(fleet, "spark2") == 0x107
    record = parse_record(fleet.sh("spark2", f"cat {OWNERSHIP_PATH}"))
    assert record.find(Kind.MASK, NVME_COALESCING_UNIT) is None
    assert _tuning_checks(fleet, "spark2") == dict.fromkeys(TUNING_CHECKS, "pass")


def test_a_mask_sparkbase_did_not_make_is_kept(fleet: fleets.Fleet) -> None:
    fleet.sh("spark3", f"systemctl mask --now {NVME_COALESCING_UNIT}")
    ops = _apply(fleet, "spark3")
    op = next(op for name, op in ops.items() if name.startswith("NVMe interrupt coalescing on"))
    assert "kept: " in json.dumps(op) and "masked, not by sparkbase" in json.dumps(op)
    assert "UnitFileState=masked" in _unit(fleet, "spark3", NVME_COALESCING_UNIT)
    assert _tuning_checks(fleet, "spark3")["host.nvme_coalescing"] == "fail"
