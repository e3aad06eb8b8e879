"""Fact parsers, reboot reasons, locks, the override log and the JSON report contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbase.deploy.areas.files import File
from sparkbase.deploy.areas.memory import Thp
from sparkbase.deploy.kinds import Step
from sparkbase.deploy.locks import LockHeld, Owner, local_locks, parse_acquire
from sparkbase.deploy.node import boot_state, mok_state
from sparkbase.deploy.operations.dkms import decide_dkms_install, dkms_state
from sparkbase.deploy.operations.kernel import grub_stale
from sparkbase.deploy.operations.packages import missing_pins
from sparkbase.deploy.reboot import boot_mismatches, reboot_reasons
from sparkbase.deploy.results import NodeResult, NodeStatus, OpResult, Report
from sparkbase.facts.assemble import assemble
from sparkbase.facts.model import GrubBoot, MokCertificate, NodeFacts, SecureBoot
from sparkbase.facts.parsers.files import parse_file_state
from sparkbase.facts.parsers.memory import parse_sysctl_output
from sparkbase.facts.script import (
    FactPlan,
    Section,
    Sections,
    fenced_script,
    marker_stdin,
    new_marker,
    split_sections,
)
from sparkbase.model.site import load_site
from sparkbase.transport import FailureKind

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "tests/fixtures/real"

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
\tmenuentry 'Ubuntu, with Linux 6.17.0-1032-nvidia' --class ubuntu {
\t\tlinux\t/boot/vmlinuz-6.17.0-1032-nvidia root=/dev/nvme0n1p2 ro quiet transparent_hugepage=madvise
\t}
\tmenuentry 'Ubuntu, with Linux 6.17.0-1008-nvidia' --class ubuntu {
\t\tlinux\t/boot/vmlinuz-6.17.0-1008-nvidia root=/dev/nvme0n1p2 ro quiet splash
\t}
}
"""


Answer = str | tuple[str, int] | tuple[str, int, str]


def answered(outputs: dict[str, Answer]) -> Sections:
    """Sections as a node answers them: name -> output (exit 0), or (output, status[, stderr])."""
    found = Sections()
    for name, value in outputs.items():
        output, status, stderr = (value, 0, "") if isinstance(value, str) else (*value, "")[:3]
        found.by_name[name] = Section(str(output), int(status), str(stderr))
    return found


#: what plan and apply read of the boot (`deploy/reads.fact_plan`)
PLAN = FactPlan(module_params=(("nvidia_drm", "modeset"), ("nvidia_drm", "fbdev")), dkms_status=True,
                kernel_modinfo=(("7.0.0-1019-nvidia-64k", "uvm_memory_saver"),), swap_files=("/x",))


def facts_of(outputs: dict[str, Answer]) -> NodeFacts:
    """The NodeFacts plan and apply decide on, from sections as a node answers them."""
    return assemble("spark1", PLAN, answered(outputs))


def grub_of(outputs: dict[str, Answer]) -> GrubBoot:
    grub = facts_of(outputs).grub
    assert grub is not None
    return grub


def test_deploy_facts_go_through_the_audits_fencing_and_parsers() -> None:
    marker = new_marker()
    named = [("uname", "echo 7.0.0-1019-nvidia-64k aarch64"), ("thp", "echo 'always [never]'")]
    script = fenced_script(named)
    out = subprocess.run(["sh", "-c", script], input=marker_stdin(marker), capture_output=True, text=True,
                         check=True).stdout
    state = boot_state(assemble("spark1", PLAN, split_sections(out, marker)))
    assert (state["kernel"], state["thp"], state["page_size"]) == ("7.0.0-1019-nvidia-64k", "never", 0)


def test_grub_state_parse_and_staleness() -> None:
    grub = grub_of({"grub-cfg": GRUB_CFG, "grubenv": ("", 1)})
    entry = "Advanced options for Ubuntu>Ubuntu, with Linux 6.17.0-1032-nvidia"
    assert grub.default == entry
    wanted = ["quiet", "transparent_hugepage=madvise"]
    assert grub_stale(grub, "6.17.0-1032-nvidia", entry, wanted, ["splash"]) is None
    assert "no entry" in str(grub_stale(grub, "7.0.0-1019-nvidia-64k", None, wanted, []))
    assert "lacks kho=off" in str(grub_stale(grub, "6.17.0-1032-nvidia", entry, [*wanted, "kho=off"], []))
    assert "forbidden" in str(grub_stale(grub, "6.17.0-1008-nvidia", None, [], ["splash"]))
    # the default is judged by what it boots, however GRUB names it
    assert "default" in str(grub_stale(grub, "6.17.0-1008-nvidia", "x", [], []))
    by_id = grub_of({"grub-cfg": GRUB_CFG.replace(entry, "${saved_entry}"),
                                 "grubenv": "saved_entry=1>1\n"})
    assert grub_stale(by_id, "6.17.0-1008-nvidia", "pinned", [], []) is None


def test_grub_state_on_a_real_separate_boot_grub_cfg() -> None:
    cfg = (REAL / "boot_grub_grub.cfg__ubuntu24.04_separate_boot__otus-hw07.txt").read_text()
    grub = grub_of({"grub-cfg": cfg, "grubenv": ("", 1)})
    assert grub_stale(grub, "6.8.0-88-generic", "0", ["ro"], ["splash"]) is None
    assert "lacks quiet" in str(grub_stale(grub, "6.8.0-88-generic", None, ["quiet"], []))


def test_mok_state_reads_every_sb_state_and_the_certificates() -> None:
    enrolled = (REAL / "mokutil_--list-enrolled__ubuntu22.04_linux-surface-906.txt").read_text()
    mok = mok_state(facts_of({"sb-state": "SecureBoot enabled\nSecureBoot validation is disabled in shim\n",
                              "mok-enrolled": enrolled, "mok-new": ("MokNew is empty\n", 1)}))
    assert mok["secure_boot"] is SecureBoot.NOT_ENFORCING
    assert mok["enrolled"][0] == "76:a0:92:06:58:00:bf:37:69:01:c3:72:cd:55:a9:0e:1f:de:d2:e0"
    assert mok["certificates"][0].serial == "b94124a0182c9267" and mok["pending"] == []
    no_efi = ("", 255, "EFI variables are not supported on this system\n")
    unsupported = mok_state(facts_of({"sb-state": no_efi}))
    assert unsupported["secure_boot"] is SecureBoot.UNSUPPORTED and unsupported["enrolled"] == []


SERIAL = "40:8B:66:4E:BC:FF:14:EE:69:A1:B9:19:78:D5:F8:FF:38:3F:21:3A"
MOK = MokCertificate("de:68:7c:66:aa:de:f7:ac:da:f7:f1:c7:c8:0f:80:9d:81:86:73:f1",
                     "408b664ebcff14ee69a1b91978d5f8ff383f213a", "sparkbase lab MOK", "sparkbase lab MOK")


def _dkms(modinfo: str, dkms: str = "uvm-memory-saver/0.4.2, 7.0.0-1019-nvidia-64k, aarch64: installed\n",
          ) -> dict[str, object]:
    noisy = (dkms, 0, "Deprecated feature: REMAKE_INITRD\n")
    facts = facts_of({"dkms": noisy, "modinfo-k:7.0.0-1019-nvidia-64k:uvm_memory_saver": modinfo})
    return dkms_state(facts, "uvm-memory-saver", "0.4.2", "7.0.0-1019-nvidia-64k", "uvm_memory_saver")


MODINFO = (f"filename: /lib/modules/7.0.0-1019-nvidia-64k/updates/dkms/uvm.ko\n"
           f"signer: sparkbase lab MOK\nsig_key: {SERIAL}\n")


@pytest.mark.parametrize(
    ("case", "current", "certs", "fingerprint", "commands"),
    [
        ("correctly signed: converged", _dkms(MODINFO), [MOK], MOK.fingerprint, []),
        ("no key pinned", _dkms(MODINFO), [], None, []),
        ("not installed", _dkms(MODINFO, dkms=""), [MOK], MOK.fingerprint,
         [["dkms", "install", "uvm-memory-saver/0.4.2", "-k", "7.0.0-1019-nvidia-64k"]]),
        ("signed by another key", _dkms(MODINFO.replace("40:8B", "40:E5")), [MOK], MOK.fingerprint,
         [["dkms", "install", "uvm-memory-saver/0.4.2", "-k", "7.0.0-1019-nvidia-64k", "--force"]]),
        ("unsigned", _dkms(MODINFO.split("signer")[0]), [MOK], MOK.fingerprint,
         [["dkms", "install", "uvm-memory-saver/0.4.2", "-k", "7.0.0-1019-nvidia-64k", "--force"]]),
        # dkms status lists it installed with a warning that /lib/modules holds another module
        ("installed with DKMS's diff warning", _dkms(MODINFO, dkms=(
            "uvm-memory-saver/0.4.2, 7.0.0-1019-nvidia-64k, aarch64: installed "
            "(WARNING! Diff between built and installed module!)\n")), [], None,
         [["dkms", "install", "uvm-memory-saver/0.4.2", "-k", "7.0.0-1019-nvidia-64k", "--force"]]),
    ],
)
def test_dkms_install_decision_judges_the_signature_like_the_audit(
    case: str, current: dict[str, object], certs: list[MokCertificate], fingerprint: str | None,
    commands: list[list[str]],
) -> None:
    decision = decide_dkms_install("uvm-memory-saver", "0.4.2", "7.0.0-1019-nvidia-64k", current, certs,
                                   fingerprint)
    assert decision.commands == commands, case


def test_file_swap_and_sysctl_parsers() -> None:
    assert parse_file_state(["600", "ab" * 32 + "  /x"]) == (0o600, "ab" * 32)
    assert parse_file_state(["__sparkbase_missing__"]) is None
    swap = facts_of({"swapstat:/x": "17179869184 600 regular file\n", "swaphdr:4096:/x": "..........\n",
                     "swaphdr:65536:/x": "SWAPSPACE2\n"}).swap_files["/x"]
    assert swap == {"size": 17179869184, "header_page_size": 65536, "mode": 0o600, "kind": "regular file"}
    link = facts_of({"swapstat:/x": "11 777 symbolic link\n"}).swap_files["/x"]
    assert link is not None and link["kind"] == "symbolic link"
    missing = ("stat: cannot statx '/x': No such file or directory", 1)
    assert facts_of({"swapstat:/x": missing}).swap_files["/x"] is None
    assert parse_sysctl_output("vm.min_free_kbytes = 1048576\nbad\n") == {"vm.min_free_kbytes": "1048576"}


def test_missing_pins_compare_exact_versions() -> None:
    installed = {"a": ["1.0"], "b": ["2.0", "2.1"]}
    assert missing_pins(["a=1.0", "b=2.1", "c=1", "a=1.1"], installed) == ["c=1", "a=1.1"]


def test_reboot_reasons_come_from_what_runs_not_only_from_this_run() -> None:
    site = load_site(REPO)
    baseline = site.baseline_of("spark1")
    running = boot_state(facts_of({
        "uname": "6.17.0-1032-nvidia aarch64\n", "pagesize": "4096\n",
        "cmdline": "BOOT_IMAGE=/boot/vmlinuz root=/dev/nvme0n1p2 ro quiet transparent_hugepage=madvise\n",
        "modules": "nvidia 1 0 - Live 0x0\nnvidia_drm 1 0 - Live 0x0\n", "param:nvidia_drm.modeset": "N\n",
        "param:nvidia_drm.fbdev": "N\n",
    }))
    mok = mok_state(NodeFacts("spark1", containers={}))
    assert reboot_reasons(baseline, running, mok, []) == []
    staged = {**running, "kernel": "6.17.0-1008-nvidia"}
    assert boot_mismatches(baseline, staged) == [
        "running kernel 6.17.0-1008-nvidia, baseline wants 6.17.0-1032-nvidia"
    ]
    grub = Step(File(path="/etc/default/grub.d/60-sparkbase.cfg", content="", mode=0o644),
                "grub drop-in", reboot=True, section="kernel")
    thp = Step(Thp(value="never"), "thp", section="memory")
    assert reboot_reasons(baseline, running, mok, [grub, thp]) == ["grub drop-in changes"]
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
                      [OpResult("file /etc/nccl.conf", "file", "changed", "", ["-a", "+b"], "nccl")],
                      unmanaged=["kernel", "driver"])
    report = Report("apply", [node])
    data = report.to_json()
    assert set(data) == {"format", "command", "exit_code", "notes", "nodes"}
    assert data["format"] == 2 and data["exit_code"] == 0
    assert set(data["nodes"][0]) == {"node", "baseline", "status", "operations", "reboot_reasons",
                                     "reboot_required", "rebooted", "running_kernel", "message", "failure",
                                     "unmanaged", "mok_enrolment"}
    assert data["nodes"][0]["failure"] is None
    assert data["nodes"][0]["mok_enrolment"] is None
    assert data["nodes"][0]["unmanaged"] == ["kernel", "driver"]
    assert node.detail().endswith("; as found, not managed: kernel, driver")
    assert set(data["nodes"][0]["operations"][0]) == {"name", "kind", "status", "reason", "diff", "section"}
    assert data["nodes"][0]["operations"][0]["section"] == "nccl"
    assert Report("apply", [NodeResult("a", "b", NodeStatus.REBOOT_PENDING)]).exit_code() == 1
    refused = NodeResult("a", "b", NodeStatus.UNREACHABLE, failure=FailureKind.HOST_KEY)
    assert Report("apply", [refused]).exit_code() == 3
    assert Report("apply", [refused]).to_json()["nodes"][0]["failure"] == "host key"
    assert Report("plan", [NodeResult("a", "b", NodeStatus.WOULD_CHANGE)]).exit_code() == 1
    assert Report("plan", [NodeResult("a", "b")]).exit_code() == 0


def test_boot_state_reads_modules_from_sys_module_when_proc_modules_is_missing() -> None:
    state = boot_state(facts_of({"modules": ("cat: /proc/modules: No such file or directory\n", 1),
                                 "modules-sys": "mlx5_core\nuvm_memory_saver\n"}))
    assert state["modules"] == ["mlx5_core", "uvm_memory_saver"]
