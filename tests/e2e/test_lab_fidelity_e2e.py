"""Issue 24, point 7, end to end: a node converged to the variant, read over SSH the way a
tool written for real Sparks reads one (own lab, port base SPARKBASE_TEST_LAB_FIDELITY_PORT_BASE:
a clone of the run's variant image, conftest.py `variant_image`, whose spark2 a real apply moved
from the factory state to the variant; spark1 beside it is as the factory left it).

The reads are the ones the variant recipe's own tooling makes (spark-ds41f bin/spark
0161d716 `HOST_FACTS_QUERY`, scripts/kernel_readiness.py 0ad64e14, scripts/host-recovery
052248c1), written here in shell and Python, never copied: `/proc/modules` with `grep`,
`lsmod`, the DRM card whose `device/driver` is nvidia and its DRM clients, the fan's cooling
device, thermal zones, the active console and its KDGETMODE, `grub-editenv list` with no
file, `/boot/config-<release>`, `modinfo -k R -F version`, the GRUB default by menu-entry id;
and nothing of the machine (its own `/usr/local/bin`, its checkout) in the node.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase_lab import boot, packages
from sparkbase_lab.shims import registry

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_LAB_FIDELITY_PORT_BASE", 3421)
NODE = fleets.VARIANT_NODE
#: the image's node as the factory left it
FACTORY_NODE = "spark1"
VARIANT = fleets.VARIANT
KERNEL_64K = "7.0.0-1019-nvidia-64k"
KERNEL_4K = "7.0.0-1019-nvidia"

#: what a doctor asks a node in one round trip (`key=value` lines)
HOST_QUERY = r"""
printf 'proc_modules=%s\n' "$(test -r /proc/modules && echo yes || echo no)"
printf 'fan_module=%s\n' "$(grep -c '^dgx_ec_fan_control ' /proc/modules)"
printf 'uvm_module=%s\n' "$(grep -c '^nvidia_uvm ' /proc/modules)"
card=""
for entry in /sys/class/drm/card[0-9]*; do
  [ "$(basename "$(readlink "$entry/device/driver")")" = nvidia ] && card=${entry##*/card}
done
printf 'drm_card=%s\n' "$card"
cooling=$(grep -lx dgx_ec_fan_floor /sys/class/thermal/cooling_device*/type 2>/dev/null | wc -l)
printf 'fan_cooling_device=%s\n' "$cooling"
zones=$(cat /sys/class/thermal/thermal_zone*/type 2>/dev/null | sort | uniq -c | tr -s ' ' | sed 's/^ //')
printf 'thermal_zones=%s\n' "$zones"
printf 'console=%s\n' "$(cat /sys/class/tty/tty0/active 2>/dev/null)"
clients=/sys/kernel/debug/dri/$card/clients
if test -r "$clients"; then
  printf 'drm_masters=%s\n' "$(awk 'NR > 1 && $4 == "y" {print $1}' "$clients" | paste -sd, -)"
else
  printf 'drm_masters=unreadable\n'
fi
vt=$(cat /sys/class/tty/tty0/active 2>/dev/null)
mode=$(python3 -c 'import fcntl, struct, sys
with open(sys.argv[1], "rb") as tty:
    print(struct.unpack("i", fcntl.ioctl(tty, 0x4B3B, struct.pack("i", -1)))[0])' "/dev/$vt" 2>/dev/null)
printf 'console_mode=%s\n' "$mode"
printf 'grubenv_rc=%s\n' "$(grub-editenv list >/dev/null 2>&1; echo $?)"
"""

#: what a readiness probe asks through the C library and the file system (Python on the node)
PY_QUERY = r"""
import json, os, subprocess
from pathlib import Path

def run(*args):
    env = dict(os.environ, LC_ALL="C")
    return subprocess.run(args, capture_output=True, text=True, env=env).stdout.strip()

out = {"release": os.uname().release, "page_size": os.sysconf("SC_PAGE_SIZE"),
       "proc_modules": sorted(ln.split()[0] for ln in Path("/proc/modules").read_text().splitlines()),
       "lsmod": sorted(line.split()[0] for line in run("lsmod").splitlines()[1:]),
       "uvm_version": run("modinfo", "-k", KERNEL_64K, "-F", "version", "nvidia_uvm"),
       "uvm_sys_version": Path("/sys/module/nvidia_uvm/version").read_text().strip(),
       "configs": {}}
for release in (KERNEL_64K, KERNEL_4K):
    text = Path(f"/boot/config-{release}").read_text()
    out["configs"][release] = {"size": len(text), "64k": "CONFIG_ARM64_64K_PAGES=y" in text,
                               "4k": "CONFIG_ARM64_4K_PAGES=y" in text}
print(json.dumps(out))
"""


class Fleet(fleets.Fleet):
    """The module's fleet; `on` runs on NODE."""

    def on(self, command: str) -> str:
        """Run a shell command on NODE; fail the test if it fails."""
        return self.sh(NODE, command)

    def facts(self) -> dict[str, str]:
        """HOST_QUERY's answer as a mapping."""
        return dict(line.split("=", 1) for line in self.on(HOST_QUERY).splitlines() if "=" in line)

    def probe(self) -> dict[str, Any]:
        """PY_QUERY's answer."""
        script = f"KERNEL_64K = {KERNEL_64K!r}\nKERNEL_4K = {KERNEL_4K!r}\n{PY_QUERY}"
        answer: dict[str, Any] = json.loads(self.on(f"python3 -c {shlex.quote(script)}"))
        return answer


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, variant_image: fleets.ConvergedImage) -> Iterator[Fleet]:
    directory = tmp_path_factory.mktemp("lab-fidelity")
    for shared in fleets.image_fleet(variant_image, directory, PORT_BASE, nodes=2):
        yield Fleet(shared.lab, shared.site)


@pytest.fixture(scope="module")
def variant(fleet: Fleet, variant_image: fleets.ConvergedImage) -> Fleet:
    """NODE converged to the variant (its kernels, memory saver, fan control), rebooted (a
    person at its console enrolled the MOK): the variant image's apply, booted again here."""
    assert [n["status"] for n in variant_image.report["nodes"]] == ["changed"]
    assert fleet.on("uname -r").strip() == KERNEL_64K
    return fleet


def test_the_factory_node_has_proc_modules_consistent_with_lsmod(fleet: Fleet) -> None:
    lsmod = sorted(line.split()[0] for line in fleet.sh(FACTORY_NODE, "lsmod").splitlines()[1:])
    proc = sorted(line.split()[0] for line in fleet.sh(FACTORY_NODE, "cat /proc/modules").splitlines())
    assert proc == lsmod and "nvidia" in proc
    assert fleet.sh(FACTORY_NODE, "test -e /proc/modules && echo yes").strip() == "yes"


def test_the_recipes_host_reads_answer_as_on_a_spark(variant: Fleet) -> None:
    facts = variant.facts()
    assert facts["proc_modules"] == "yes"
    assert facts["fan_module"] == "1" and facts["uvm_module"] == "1"
    assert facts["drm_card"] == "0"  # a DRM card belongs to the nvidia driver
    assert facts["fan_cooling_device"] == "1"
    assert facts["thermal_zones"] == "7 acpitz"
    assert facts["console"] == "tty1"
    assert facts["drm_masters"] == ""  # no process holds DRM master of the nvidia card
    assert facts["console_mode"] == "0"  # KDGETMODE: text (booted without splash)
    assert facts["grubenv_rc"] == "0"


def test_the_readiness_probe_reads_modules_configs_and_the_drivers_uvm_version(variant: Fleet) -> None:
    found = variant.probe()
    assert (found["release"], found["page_size"]) == (KERNEL_64K, 65536)
    assert found["proc_modules"] == found["lsmod"]
    assert "dgx_ec_fan_control" in found["proc_modules"]
    # the patched nvidia_uvm reports the driver it was built from, not DKMS's 0.2.0
    assert found["uvm_version"] == found["uvm_sys_version"] == packages.VARIANT_DRIVER
    configs = found["configs"]
    assert configs == {KERNEL_64K: {"size": configs[KERNEL_64K]["size"], "64k": True, "4k": False},
                       KERNEL_4K: {"size": configs[KERNEL_4K]["size"], "64k": False, "4k": True}}
    assert min(c["size"] for c in configs.values()) > 1000


def test_the_grub_default_is_the_64k_kernels_entry_id(variant: Fleet) -> None:
    dropin = variant.on("cat /etc/default/grub.d/60-sparkbase.cfg")
    assert f'GRUB_DEFAULT="gnulinux-advanced-${{GRUB_DEVICE_UUID}}>gnulinux-{KERNEL_64K}-advanced-' in dropin
    uuid = boot.root_uuid(NODE)
    cfg = variant.on("cat /boot/grub/grub.cfg")
    assert f'set default="{boot.entry_id_path(KERNEL_64K, uuid)}"' in cfg
    # the recipe's trial boot names the 4 KiB kernel by id too, and it boots it once
    variant.on(f"grub-reboot {shlex.quote(boot.entry_id_path(KERNEL_4K, uuid))}")
    assert f"next_entry={boot.entry_id_path(KERNEL_4K, uuid)}" in variant.on("grub-editenv list")
    variant.on("grub-editenv - unset next_entry")
    assert "next_entry" not in variant.on("grub-editenv list")


def test_nothing_of_the_machine_is_in_the_node(variant: Fleet) -> None:
    local_bin = set(variant.on("ls -A /usr/local/bin").split())
    assert local_bin <= set(registry.commands())
    roots = set(variant.on("ls -A /").split())
    assert roots <= set(fleets_root_names()), roots - set(fleets_root_names())
    checkout = str(fleets.REPO)
    assert variant.lab.run(NODE, f"test -e {shlex.quote(checkout)}")[0] != 0


def fleets_root_names() -> list[str]:
    """What a node's root may list: a DGX OS root (the lab's) and its own swap files."""
    from sparkbase_lab.image import SPARK_ROOT

    return sorted(SPARK_ROOT)
