"""Fact parsers, reboot reasons, locks, the override log and the JSON report contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbase.deploy.facts import (
    parse_boot_state,
    parse_dkms_state,
    parse_file_state,
    parse_grub_cfg,
    parse_mok_state,
    parse_swap_file,
    parse_sysctls,
    thp_selected,
)
from sparkbase.deploy.locks import LockHeld, Owner, local_locks, parse_acquire
from sparkbase.deploy.operations import grub_stale, missing_pins
from sparkbase.deploy.reboot import boot_mismatches, reboot_reasons
from sparkbase.deploy.results import NodeResult, NodeStatus, OpResult, Report
from sparkbase.deploy.steps import Step
from sparkbase.model.site import load_site

REPO = Path(__file__).resolve().parents[2]

GRUB_CFG = """\
if [ "${next_entry}" ] ; then
   set default="${next_entry}"
else
   set default="Advanced options for Ubuntu>Ubuntu, with Linux 6.17.0-1032-nvidia"
fi
menuentry 'Ubuntu' --class ubuntu {
\tlinux\t/boot/vmlinuz-6.17.0-1032-nvidia root=/dev/nvme0n1p2 ro quiet transparent_hugepage=madvise
}
submenu 'Advanced options for Ubuntu' {
\tmenuentry 'Ubuntu, with Linux 6.17.0-1008-nvidia' --class ubuntu {
\t\tlinux\t/boot/vmlinuz-6.17.0-1008-nvidia root=/dev/nvme0n1p2 ro quiet splash
\t}
}
""".splitlines()


def test_grub_cfg_parse_and_staleness() -> None:
    grub = parse_grub_cfg(GRUB_CFG)
    entry = "Advanced options for Ubuntu>Ubuntu, with Linux 6.17.0-1032-nvidia"
    assert grub["default"] == entry
    assert grub["entries"]["6.17.0-1008-nvidia"][-1] == "splash"
    wanted = ["quiet", "transparent_hugepage=madvise"]
    assert grub_stale(grub, "6.17.0-1032-nvidia", entry, wanted, ["splash"]) is None
    assert "no entry" in str(grub_stale(grub, "7.0.0-1019-nvidia-64k", None, wanted, []))
    assert "lacks kho=off" in str(grub_stale(grub, "6.17.0-1032-nvidia", entry, [*wanted, "kho=off"], []))
    assert "default" in str(grub_stale(grub, "6.17.0-1032-nvidia", "0", wanted, []))
    assert "forbidden" in str(grub_stale(grub, "6.17.0-1008-nvidia", None, [], ["splash"]))


def test_mok_state_parse() -> None:
    out = ["SecureBoot enabled", "--enrolled--", "[key 1]", "SHA1 Fingerprint: AA:BB:cc", "Certificate:",
           "--pending--", "MokNew is empty"]
    assert parse_mok_state(out) == {"secure_boot": True, "enrolled": ["aa:bb:cc"], "pending": []}
    assert parse_mok_state(["SecureBoot disabled", "--enrolled--", "--pending--",
                            "SHA1 Fingerprint: 01:02"])["pending"] == ["01:02"]


def test_dkms_and_file_and_swap_parsers() -> None:
    lines = ["uvm-memory-saver/0.4.2, 7.0.0-1019-nvidia-64k, aarch64: installed", "sig_key=DE:68"]
    assert parse_dkms_state(lines, "7.0.0-1019-nvidia-64k") == {"installed": True, "sig_key": "de:68"}
    assert parse_dkms_state(lines, "6.17.0-1032-nvidia")["installed"] is False
    assert parse_file_state(["600", "abc  /x"]) == (0o600, "abc")
    assert parse_file_state(["__sparkbase_missing__"]) is None
    swap = parse_swap_file(["size=17179869184", "mode=600", "header= 65536"])
    assert swap == {"size": 17179869184, "header_page_size": 65536, "mode": 0o600}
    assert parse_swap_file(["size=10", "mode=644", "header="])["header_page_size"] is None  # type: ignore[index]
    assert parse_sysctls(["vm.min_free_kbytes = 1048576", "bad"]) == {"vm.min_free_kbytes": "1048576"}
    assert thp_selected("always [madvise] never") == "madvise"
    assert thp_selected("never") == "never"


def test_missing_pins_compare_exact_versions() -> None:
    installed = {"a": ["1.0"], "b": ["2.0", "2.1"]}
    assert missing_pins(["a=1.0", "b=2.1", "c=1", "a=1.1"], installed) == ["c=1", "a=1.1"]


def test_reboot_reasons_come_from_what_runs_not_only_from_this_run() -> None:
    site = load_site(REPO)
    baseline = site.baseline_of("spark1")
    running = parse_boot_state([
        "kernel=6.17.0-1032-nvidia", "page_size=4096",
        "cmdline=BOOT_IMAGE=/boot/vmlinuz root=/dev/nvme0n1p2 ro quiet transparent_hugepage=madvise",
        "modules=nvidia nvidia_drm", "drm_modeset=N", "drm_fbdev=N",
    ])
    mok = parse_mok_state([])
    assert reboot_reasons(baseline, running, mok, []) == []
    staged = {**running, "kernel": "6.17.0-1008-nvidia"}
    assert boot_mismatches(baseline, staged) == [
        "running kernel 6.17.0-1008-nvidia, baseline wants 6.17.0-1032-nvidia"
    ]
    grub = Step("file", "grub drop-in", {"path": "/etc/default/grub.d/60-sparkbase.cfg"}, reboot=True)
    assert reboot_reasons(baseline, running, mok, [grub, Step("thp", "thp")]) == ["grub drop-in changes"]
    drm = {**running, "drm_modeset": "Y"}
    assert "nvidia_drm modeset=Y loaded, baseline wants N" in reboot_reasons(baseline, drm, mok, [])


def test_local_lock_refuses_a_second_holder_in_another_process(tmp_path: Path) -> None:
    owner = Owner()
    script = (
        "import sys; from pathlib import Path; from sparkbase.deploy.locks import *\n"
        "try:\n"
        "    with local_locks(Path(sys.argv[1]), ['spark1'], Owner()): print('acquired')\n"
        "except LockHeld as exc: print(exc)\n"
    )
    with local_locks(tmp_path, ["spark1", "spark2"], owner):
        held = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                              text=True, check=True).stdout
        assert "another apply holds the local lock" in held
        assert f"pid {os.getpid()}" in held
    free = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, check=True).stdout
    assert free.strip() == "acquired"


def test_remote_lock_output_parsing() -> None:
    parse_acquire("spark1", ["SPARKBASE-LOCK-ACQUIRED"])
    owner = Owner(user="ops", host="admin1", pid=42, started="2026-11-29T12:00:00+00:00")
    with pytest.raises(LockHeld, match=r"spark1: another apply holds the node lock \(ops@admin1 pid 42"):
        parse_acquire("spark1", ["SPARKBASE-LOCK-HELD", owner.json()])
    with pytest.raises(LockHeld):
        parse_acquire("spark1", [])


def test_report_json_contract_and_exit_codes() -> None:
    node = NodeResult("spark1", "site-stock-6.17-4k", NodeStatus.CHANGED,
                      [OpResult("file /etc/nccl.conf", "file", "changed", "", ["-a", "+b"])])
    report = Report("apply", [node])
    data = report.to_json()
    assert set(data) == {"format", "command", "exit_code", "notes", "nodes"}
    assert data["format"] == 1 and data["exit_code"] == 0
    assert set(data["nodes"][0]) == {"node", "baseline", "status", "operations", "reboot_reasons",
                                     "reboot_required", "rebooted", "running_kernel", "message"}
    assert set(data["nodes"][0]["operations"][0]) == {"name", "kind", "status", "reason", "diff"}
    assert Report("apply", [NodeResult("a", "b", NodeStatus.REBOOT_PENDING)]).exit_code() == 1
    assert Report("apply", [NodeResult("a", "b", NodeStatus.UNREACHABLE)]).exit_code() == 3
    assert Report("plan", [NodeResult("a", "b", NodeStatus.WOULD_CHANGE)]).exit_code() == 1
    assert Report("plan", [NodeResult("a", "b")]).exit_code() == 0
