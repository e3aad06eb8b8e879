"""The benchmark's plain testinfra suite (bench/plain_testinfra) judges a reading as the audit
does: its assertions run here against a stand-in host that answers with canned outputs
(real samples where there are some), each case with the audit's verdict on the same reading."""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "tests/fixtures/real"
SLICE_SHOW = "SECONDBEST__systemctl_show_-p_UnitFileState_-p_ActiveState_-p_AllowedCPUs__4services+slice.txt"
#: the CPUs of the shipped baselines' serving slice
SLICE_CPUS = (5, 6, 7, 8, 9, 15, 16, 17, 18, 19)
#: nvidia-smi --query-gpu=<GPU_QUERY>: driver, SM clock, power, load, clock-event reasons
IDLE = "580.126.09, 562, 4.05, 0, 0x0000000000000001"
LATCHED = "580.126.09, 611, 10.12, 98, 0x0000000000000000"
FULL = "580.126.09, 2418, 35.21, 97, 0x0000000000000000"
POWER_CAPPED = "580.126.09, 700, 30.5, 97, 0x0000000000000004"


def _plain() -> ModuleType:
    """bench/plain_testinfra/test_plain.py (not a package: loaded by path)."""
    path = REPO / "bench/plain_testinfra/test_plain.py"
    spec = importlib.util.spec_from_file_location("bench_plain_suite", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAIN = _plain()


@dataclass
class FakeFile:
    content_string: str | None

    @property
    def exists(self) -> bool:
        return self.content_string is not None


@dataclass
class FakeHost:
    """Answers `run` by command and `file` by path, as testinfra's host would."""

    commands: dict[str, tuple[str, int]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def run(self, command: str) -> SimpleNamespace:
        stdout, rc = self.commands[command]
        return SimpleNamespace(stdout=stdout, rc=rc)

    def file(self, path: str) -> FakeFile:
        return FakeFile(self.files.get(path))


def _verdict(test: Any, *args: Any) -> str:
    """`pass`, `fail`, `warn` or `skip` of one plain assertion."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            test(*args)
        except AssertionError:
            return "fail"
        except pytest.skip.Exception:
            return "skip"
    return "warn" if caught else "pass"


GPU_QUERY = "nvidia-smi --query-gpu=" + ",".join(PLAIN.GPU_QUERY) + " --format=csv,noheader,nounits"


@pytest.mark.parametrize(
    ("reading", "rc", "verdict"),
    [
        (IDLE, 0, "pass"),  # an idle GB10 clocks down: not a latch (was `>= 1000` and failed)
        (FULL, 0, "pass"),
        (LATCHED, 0, "fail"),
        (POWER_CAPPED, 0, "fail"),  # throttled
        # no reading: the audit skips gpu.clock (driver.version reports it), so does the suite
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", 9, "skip"),
    ],
    ids=["idle", "full", "latched", "power-capped", "no-driver"],
)
def test_gpu_clock(reading: str, rc: int, verdict: str) -> None:
    host = FakeHost(commands={GPU_QUERY: (reading + "\n", rc)})
    assert _verdict(PLAIN.test_gpu_clock, host) == verdict


@pytest.mark.parametrize(
    ("allowed", "verdict"),
    [
        ((REAL / SLICE_SHOW).read_text().rsplit("AllowedCPUs=", 1)[1].strip(), "pass"),  # `5-9 15-19`
        ("5-9,15-19", "pass"),
        ("15-19 5-9", "pass"),
        ("5-9", "fail"),
        ("", "fail"),
    ],
    ids=["real-space-separated", "comma", "reordered", "half", "unset"],
)
def test_slice_compared_as_a_set(allowed: str, verdict: str) -> None:
    baseline = SimpleNamespace(cpuset=SimpleNamespace(slice="sparkbase-serving.slice", cpus=SLICE_CPUS))
    host = FakeHost(commands={
        "systemctl show -p AllowedCPUs --value sparkbase-serving.slice": (allowed + "\n", 0)
    })
    assert _verdict(PLAIN.test_slice, host, baseline) == verdict


def _cpuinfo(parts: dict[int, str]) -> str:
    return "\n".join(f"processor\t: {cpu}\nCPU part\t: {part}\n" for cpu, part in parts.items())


@pytest.mark.parametrize(
    ("parts", "verdict"),
    [
        ({cpu: "0xd85" if cpu in SLICE_CPUS else "0xd87" for cpu in range(20)}, "pass"),
        ({cpu: "0xd85" if cpu < 10 else "0xd87" for cpu in range(20)}, "fail"),  # 15-19 are slow
        ({}, "pass"),  # no CPU parts: says nothing, as in the audit
    ],
    ids=["fast", "slow-cores", "unknown"],
)
def test_slice_on_fast_cores(parts: dict[int, str], verdict: str) -> None:
    baseline = SimpleNamespace(cpuset=SimpleNamespace(cpus=SLICE_CPUS))
    host = FakeHost(files={"/proc/cpuinfo": _cpuinfo(parts)})
    assert _verdict(PLAIN.test_slice_fast_cores, host, baseline) == verdict


@pytest.mark.parametrize(
    ("sample", "enabled", "verdict"),
    [
        ("mokutil_--sb-state__enabled.txt", True, "pass"),
        ("mokutil_--sb-state__enabled_validation_disabled_in_shim.txt", True, "fail"),
        ("mokutil_--sb-state__enabled_validation_disabled_in_shim.txt", False, "pass"),
        ("mokutil_--sb-state__disabled_setup_mode.txt", True, "fail"),
        ("mokutil_--sb-state__disabled_setup_mode.txt", False, "pass"),
    ],
)
def test_secure_boot(sample: str, enabled: bool, verdict: str) -> None:
    host = FakeHost(commands={"mokutil --sb-state": ((REAL / sample).read_text(), 0)})
    baseline = SimpleNamespace(secure_boot=SimpleNamespace(enabled=enabled))
    assert _verdict(PLAIN.test_secure_boot, host, baseline) == verdict


ROCE_V2 = (REAL / "SECONDBEST__sys_class_infiniband_gid_attrs_types_N__RoCEv2.txt").read_text()
ROCE_V1 = (REAL / "SECONDBEST__sys_class_infiniband_gid_attrs_types_N__RoCEv1.txt").read_text()
MAPPED_10_40_2_1 = "0000:0000:0000:0000:0000:ffff:0a28:0201"


@pytest.mark.parametrize(
    ("index", "kind", "gid", "verdict"),
    [
        (5, ROCE_V2, MAPPED_10_40_2_1, "pass"),  # the node's own index, not the baseline's 3
        (5, ROCE_V1, MAPPED_10_40_2_1, "fail"),
        (5, ROCE_V2, "fe80:0000:0000:0000:0000:0000:0000:0001", "fail"),  # not IPv4-mapped
        (5, ROCE_V2, "0000:0000:0000:0000:0000:ffff:0a28:0202", "fail"),  # another address
    ],
    ids=["node-index", "roce-v1", "link-local", "wrong-address"],
)
def test_gids(index: int, kind: str, gid: str, verdict: str) -> None:
    attrs = "/sys/class/infiniband/rocep1s0f0/ports/1"
    host = FakeHost(files={f"{attrs}/gid_attrs/types/{index}": kind, f"{attrs}/gids/{index}": gid + "\n"})
    expected = SimpleNamespace(
        gid_index=index,
        baseline=SimpleNamespace(fabric=SimpleNamespace(
            gid_index=3, ports=[SimpleNamespace(hca="rocep1s0f0", netdev="enp1s0f0np0")]
        )),
        cables={"enp1s0f0np0": SimpleNamespace(address="10.40.2.1/24")},
    )
    assert _verdict(PLAIN.test_gids, host, expected) == verdict


@pytest.mark.parametrize(
    ("want", "governors", "verdict"),
    [
        ("performance", ["performance"] * 4, "pass"),
        ("performance", ["performance", "powersave", "performance", "performance"], "warn"),  # audit: warn
        (None, ["powersave"] * 4, "skip"),
    ],
    ids=["all", "one-off-is-a-warning", "unmanaged"],
)
def test_governor(want: str | None, governors: list[str], verdict: str) -> None:
    cpus = [f"/sys/devices/system/cpu/cpu{n}" for n in range(len(governors))]
    host = FakeHost(
        commands={"ls -d /sys/devices/system/cpu/cpu[0-9]*": ("\n".join(cpus) + "\n", 0)},
        files={f"{cpu}/cpufreq/scaling_governor": g + "\n" for cpu, g in zip(cpus, governors, strict=True)},
    )
    baseline = SimpleNamespace(host=SimpleNamespace(cpu_governor=want))
    assert _verdict(PLAIN.test_governor, host, baseline) == verdict
