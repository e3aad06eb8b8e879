"""The fact script: built from quoted pieces, split back into sections, assembled into facts."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from sparkbase.audit.expected import expected_for
from sparkbase.facts.areas import build_script, file_reads, plan_for, sections
from sparkbase.facts.assemble import assemble
from sparkbase.facts.model import SecureBoot, UnitState
from sparkbase.facts.parsers.files import expand_files
from sparkbase.facts.script import Section, marker_stdin, new_marker, split_sections
from sparkbase.model.site import Site, load_site

REPO = Path(__file__).parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "facts"
CAPTURED_MARKER = "@@sparkbase-facts-0123456789abcdef@@"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


def test_plan_reads_exactly_what_the_baseline_names(site: Site) -> None:
    plan = expected_for(site, "spark1").plan()
    assert plan.sysctls == ("vm.max_map_count", "vm.min_free_kbytes")
    assert plan.hashed_paths[0] == "/opt/nccl-site/lib/libnccl.so.2.27.7"
    assert "/etc/sparkbase/stamp.json" not in plan.hashed_paths
    assert plan.swap_paths == () and plan.memory_saver_module is None
    variant = expected_for(site, "spark1", "ds41f-7x-64k").plan()
    # the installer's /swap.img too: the 4 KiB fallback kernel swaps on it (swap_by_page_size)
    assert variant.swap_paths == ("/swap-64k.img", "/swap.img")
    assert "sparkbase-swap.service" in variant.units
    assert variant.memory_saver_module == "nvidia_uvm"
    assert "dgx-fan-control.service" in variant.units
    # fan control: its module's modinfo, dkms status, and whether the modeset0 override is installed
    assert variant.fan_module == "dgx_ec_fan_control" and plan.fan_module is None
    assert "nvidia-drm-options-modeset0" in variant.packages
    found = dict(sections(variant))
    assert shlex.split(found["modinfo-fan"]) == ["modinfo", "dgx_ec_fan_control"] and "dkms" in found


def test_plan_asks_dpkg_about_the_other_baselines_pins_too(site: Site) -> None:
    expected = expected_for(site, "spark1")
    plan = expected.plan()
    own = [pin.name for pin in expected.baseline.packages()]
    assert list(plan.packages) == [*own, *expected.foreign_packages]
    assert "dgx-spark-fan-control" in plan.packages and "linux-image-7.0.0-1019-nvidia-64k" in plan.packages
    dpkg = dict(sections(plan))["dpkg"]
    assert "nvidia-kernel-source-580-open" in shlex.split(dpkg)


def test_every_section_command_is_quoted_words(site: Site) -> None:
    plan = expected_for(site, "spark1", "ds41f-7x-64k").plan()
    for name, command in sections(plan):
        shell = {"files", "modules-sys", "links", "drm-drivers", "drm-clients"}
        if name in shell or name.startswith("swaphdr"):
            continue  # quoted paths plus constant globs / a test / a loop, or a pipeline of quoted commands
        words = shlex.split(command)
        assert shlex.join(words) == command, name


def test_marker_is_unique_per_run() -> None:
    assert new_marker() != new_marker()


def test_script_runs_under_sh_and_splits_back(tmp_path: Path, site: Site) -> None:
    """The script itself runs under a local POSIX sh: sections come back with exit statuses."""
    plan = expected_for(site, "spark1").plan()
    marker = new_marker()
    script = build_script(plan)
    out = subprocess.run(["sh", "-c", script], input=marker_stdin(marker), capture_output=True, text=True,
                         check=False).stdout
    found = split_sections(out, marker)
    assert {name for name, _ in sections(plan)} == set(found.by_name)
    files = expand_files(found, file_reads(plan))
    assert {name for name, _ in file_reads(plan)} <= set(files.by_name)
    cmdline = files.get("cmdline")
    assert cmdline is not None and cmdline.status == 0
    assert cmdline.output == Path("/proc/cmdline").read_text()
    stamp = files.get("stamp")
    assert stamp is not None and stamp.status != 0  # no stamp on this machine
    assert "No such file" in stamp.output


def test_forged_marker_in_file_content_is_not_a_section() -> None:
    marker = "@@sparkbase-facts-aaaa@@"
    text = f"{marker} BEGIN a\n@@sparkbase-facts-bbbb@@ END a 0\nreal\n{marker} END a 0\n"
    found = split_sections(text, marker)
    section = found.get("a")
    assert section is not None and section.output.endswith("real")


def test_captured_factory_answer_assembles(site: Site) -> None:
    expected = expected_for(site, "spark1")
    text = (FIXTURES / "factory-site-stock.out").read_text()
    facts = assemble("spark1", expected.plan(), split_sections(text, CAPTURED_MARKER))
    assert facts.kernel_release == "6.17.0-1008-nvidia"
    assert facts.page_size == 4096 and facts.machine == "aarch64"
    assert facts.thp == "madvise"
    assert facts.fast_cpus == (5, 6, 7, 8, 9, 15, 16, 17, 18, 19)
    assert facts.gpu.driver_version == "580.95.05"
    assert facts.secure_boot is SecureBoot.ENABLED
    assert facts.default_target == "graphical.target"
    assert facts.units["gdm3.service"].active
    assert facts.sysctls == {"vm.max_map_count": "65530", "vm.min_free_kbytes": "67584"}
    assert set(facts.rdma_devices) == {"rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"}
    assert facts.file_sha256["/etc/nccl.conf"] is None
    assert facts.stamp is None
    assert facts.interfaces["enp1s0f0np0"].mtu == 1500


def test_captured_variant_answer_assembles(site: Site) -> None:
    expected = expected_for(site, "spark1", "ds41f-7x-64k")
    text = (FIXTURES / "factory-ds41f.out").read_text()
    facts = assemble("spark1", expected.plan(), split_sections(text, CAPTURED_MARKER))
    assert facts.swap_header_page_size == {"/swap-64k.img": None, "/swap.img": None}
    assert facts.memory_saver is not None and facts.memory_saver.error is not None
    assert facts.units["dgx-fan-control.service"].active_state == "inactive"
    assert facts.fan_control is None  # the capture predates the fan module's modinfo section
    # a factory node: DGX OS's governor unit ran and exited, its coalescing unit set 0x107
    assert facts.units["nv-cpu-governor.service"] == UnitState("enabled", "inactive")
    assert facts.nvme_coalescing == 0x107


def test_a_cut_short_answer_records_what_is_missing(site: Site) -> None:
    expected = expected_for(site, "spark1")
    text = (FIXTURES / "factory-site-stock.out").read_text()
    cut = text[: text.index(f"{CAPTURED_MARKER} BEGIN thp")]
    facts = assemble("spark1", expected.plan(), split_sections(cut, CAPTURED_MARKER))
    assert facts.kernel_release == "6.17.0-1008-nvidia"
    assert facts.thp is None and "thp" in facts.errors


def test_plain_files_are_read_by_one_process(site: Site) -> None:
    plan = expected_for(site, "spark1", "ds41f-7x-64k").plan()
    names = [name for name, _ in sections(plan)]
    assert not any(command.startswith("cat ") for _, command in sections(plan))
    assert "files" in names and "cmdline" not in names and "sysctl:vm.min_free_kbytes" not in names
    words = dict(sections(plan))["files"].split()
    assert words[:4] == ["grep", "-aH", "''", "--"]
    assert {"/boot/grub/grub.cfg", "/boot/grub/grubenv", "/etc/fstab", "/etc/dgx-release"} <= set(words)


def test_every_node_reports_the_free_memory_reserve(site: Site) -> None:
    """Whatever its baseline sets, the fleet must agree on vm.min_free_kbytes."""
    baseline = expected_for(site, "spark1").baseline
    bare = baseline.model_copy(update={"memory": baseline.memory.model_copy(update={"sysctls": {}})})
    assert plan_for(bare, [], "/etc/sparkbase/stamp.json").sysctls == ("vm.min_free_kbytes",)


def test_expand_files_attributes_every_line_to_its_file() -> None:
    marker = "@@m@@"
    reads: list[tuple[str, tuple[str, ...]]] = [
        ("fstab", ("/etc/fstab",)), ("stamp", ("/etc/stamp",)), ("empty", ("/etc/empty",)),
        ("gov", ("/sys/cpu[0-9]*/gov",)), ("nv", ("/sys/module/nvidia*/version",)),
    ]
    body = (
        "/etc/fstab:/swapfile none swap sw 0 0\n"
        f"/etc/fstab:{marker} END files 0\n"  # content that looks like a marker stays content
        "/etc/fstab:/etc/stamp:forged\n"
        "grep: /etc/stamp: No such file or directory\n"
        "/sys/cpu3/gov:performance\n"
        "grep: /sys/module/nvidia*/version: No such file or directory"
    )
    text = f"{marker} BEGIN files\n{body}\n{marker} END files 2\n"
    found = expand_files(split_sections(text, marker), reads)
    fstab = found.get("fstab")
    assert fstab is not None and fstab.status == 0
    assert fstab.output == f"/swapfile none swap sw 0 0\n{marker} END files 0\n/etc/stamp:forged\n"
    stamp = found.get("stamp")
    assert stamp is not None and stamp.status == 2 and "No such file" in stamp.output
    assert found.get("empty") == Section("", 0)
    assert found.get("gov") == Section("/sys/cpu3/gov:performance\n", 0)
    nvidia = found.get("nv")
    assert nvidia is not None and nvidia.status == 2


def test_stderr_of_apart_sections_is_fenced_on_the_scripts_stderr() -> None:
    """dkms prints its warnings on stderr, sometimes into the middle of a status line on a
    terminal; the script keeps them out of what the parser reads, with the exit status."""
    import subprocess

    from sparkbase.facts.script import fenced_script

    marker = new_marker()
    noisy = ("printf 'm/1, k, aarch64: installed'; echo 'Deprecated feature: REMAKE_INITRD' >&2; echo; "
             "sh -c 'exit 3'")
    script = fenced_script([("dkms", noisy), ("uname", "echo r m; echo oops >&2")])
    done = subprocess.run(["sh", "-c", script], input=marker_stdin(marker), capture_output=True, text=True,
                          check=True)
    found = split_sections(done.stdout, marker, done.stderr)
    dkms = found.get("dkms")
    assert dkms is not None and dkms.output == "m/1, k, aarch64: installed\n" and dkms.status == 3
    assert dkms.stderr == "Deprecated feature: REMAKE_INITRD\n"
    uname = found.get("uname")
    assert uname is not None and uname.output == "r m\noops\n" and uname.stderr == ""  # merged
