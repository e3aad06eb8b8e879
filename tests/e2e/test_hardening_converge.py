"""Hardening, end to end: an apply cut short after a file was written is finished by the next.

A run that dies between writing a file and its follow-up (`netplan apply`, `systemctl
daemon-reload`, `update-initramfs`, the reboot) leaves the file right and its effect
missing. Each case puts a converged node in exactly that state (the follow-up's old effect
made live first, then the rendered file written back by hand, as the cut-short run wrote
it), and shows that `plan` names the follow-up, `apply` runs it (rebooting and verifying
when it is staged for a reboot), and a further `plan` is empty.

One lab (port base 3171) for the module: spark1 and spark2 of a clone of the run's converged
image (conftest.py `converged_image`: a real apply from the factory state, reboot included).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fleets import ConvergedImage, Fleet, image_fleet
from ports import port_base

from sparkbase.deploy.steps import build_steps
from sparkbase.model.site import load_site
from sparkbase.render import GRUB_DROPIN_PATH, MODPROBE_PATH, NETPLAN_PATH, node_files

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_CONVERGE_PORT_BASE", 3171)
NODE = "spark1"
SLICE = "/etc/systemd/system/sparkbase-serving.slice"
FBDEV = "/sys/module/nvidia_drm/parameters/fbdev"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage) -> Iterator[Fleet]:
    directory = tmp_path_factory.mktemp("hardening-converge")
    yield from image_fleet(converged_image, directory, PORT_BASE, nodes=2)


@pytest.fixture(scope="module")
def converged(fleet: Fleet) -> Fleet:
    """NODE converged from the factory (reboot included: the image's apply), its plan empty."""
    assert _would(_plan(fleet)) == {}
    return fleet


def _rendered(fleet: Fleet, path: str) -> str:
    return next(f.content for f in node_files(load_site(fleet.site), NODE) if f.path == path)


def _plan(fleet: Fleet) -> dict[str, Any]:
    done = fleet.sparkbase("plan", "--limit", NODE, "--json")
    result: dict[str, Any] = json.loads(done.stdout)["nodes"][0]
    return result


def _would(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The operations that would change, by kind, and the reboot reasons under "reboot"."""
    would = {op["kind"]: op for op in node["operations"] if op["status"] == "would change"}
    if node["reboot_reasons"]:
        would["reboot"] = {"reasons": node["reboot_reasons"]}
    return would


def _apply(fleet: Fleet, *extra: str) -> dict[str, Any]:
    done = fleet.sparkbase("apply", "--limit", NODE, "--yes", "--json", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout)["nodes"][0]
    return result


def _changed(result: dict[str, Any]) -> set[str]:
    return {op["kind"] for op in result["operations"] if op["status"] == "changed"}


def _link(fleet: Fleet, netdev: str) -> tuple[int, list[str]]:
    """A netdev's live MTU and IPv4 addresses."""
    links = json.loads(fleet.sh(NODE, "ip -j addr show"))
    link = next(entry for entry in links if entry["ifname"] == netdev)
    return link["mtu"], [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"]


def test_a_netplan_written_but_never_applied_is_applied_by_the_next_run(converged: Fleet) -> None:
    fleet = converged
    rendered = _rendered(fleet, NETPLAN_PATH)
    stale = rendered.replace("10.12.1.1/24", "10.99.1.1/24").replace("mtu: 9000", "mtu: 1500", 1)
    assert stale != rendered
    fleet.sh(NODE, f"cat > {NETPLAN_PATH} && netplan apply", input=stale)
    fleet.sh(NODE, f"cat > {NETPLAN_PATH}", input=rendered)  # the cut-short run's write
    assert _link(fleet, "enp1s0f0np0") == (1500, ["10.99.1.1/24"])

    assert set(_would(_plan(fleet))) == {"netplan-apply"}
    assert _changed(_apply(fleet)) == {"netplan-apply"}
    assert _link(fleet, "enp1s0f0np0") == (9000, ["10.12.1.1/24"])
    assert _would(_plan(fleet)) == {}


def test_a_slice_written_but_never_reloaded_is_reloaded_by_the_next_run(converged: Fleet) -> None:
    fleet = converged
    rendered = _rendered(fleet, SLICE)
    fleet.sh(NODE, f"cat > {SLICE} && systemctl daemon-reload", input=rendered.replace("5-9,15-19", "0-19"))
    fleet.sh(NODE, f"cat > {SLICE}", input=rendered)  # the cut-short run's write
    need = f"systemctl show -p NeedDaemonReload {SLICE.rsplit('/', 1)[1]}"
    assert fleet.sh(NODE, need).strip() == "NeedDaemonReload=yes"

    plan = _would(_plan(fleet))
    assert set(plan) == {"daemon-reload"}
    assert _changed(_apply(fleet)) == {"daemon-reload"}
    assert fleet.sh(NODE, need).strip() == "NeedDaemonReload=no"
    assert _would(_plan(fleet)) == {}


def _packed(fleet: Fleet, release: str) -> str | None:
    """The options file as NODE's initramfs for `release` packs it (unmkinitramfs)."""
    out = fleet.sh(NODE, f"d=$(mktemp -d) && unmkinitramfs /boot/initrd.img-{release} \"$d\" && "
                         f"(base64 -w0 \"$d{MODPROBE_PATH}\" 2>/dev/null || true); rm -rf \"$d\"")
    return base64.b64decode(out).decode() if out.strip() else None


def _stale_initramfs(fleet: Fleet) -> tuple[str, str, str]:
    """NODE as a run cut short after writing the options left it, booted on the old image:
    (its release, the rendered options, the old ones)."""
    release = fleet.sh(NODE, "uname -r").strip()
    rendered = _rendered(fleet, MODPROBE_PATH)
    old = rendered.replace("fbdev=0", "fbdev=1")
    assert old != rendered
    fleet.sh(NODE, f"cat > {MODPROBE_PATH} && update-initramfs -u -k all", input=old)
    fleet.lab.reboot(NODE)
    fleet.sh(NODE, f"cat > {MODPROBE_PATH}", input=rendered)  # the cut-short run's write
    return release, rendered, old


def test_options_written_but_never_packed_are_packed_and_booted_by_the_next_run(converged: Fleet) -> None:
    """The case that rebooted forever: the options file is right, the initramfs packs the
    old one and the node runs it, so every reboot loaded the old options again and failed
    verification. The next run rebuilds the image, reboots, and verifies."""
    fleet = converged
    release, rendered, old = _stale_initramfs(fleet)
    assert _packed(fleet, release) == old
    assert fleet.sh(NODE, f"cat {FBDEV}").strip() == "Y"

    plan = _would(_plan(fleet))
    assert set(plan) == {"initramfs-update", "reboot"}
    assert any("fbdev=Y" in reason for reason in plan["reboot"]["reasons"])
    result = _apply(fleet, "--allow-reboot", "--reboot-timeout", "60")
    assert result["status"] == "changed" and result["rebooted"], result
    assert "initramfs-update" in _changed(result)
    assert _packed(fleet, release) == rendered
    assert fleet.sh(NODE, f"cat {FBDEV}").strip() == "N"
    assert _would(_plan(fleet)) == {}


def test_a_dropped_kernel_argument_and_its_staged_reboot_are_finished_by_later_runs(converged: Fleet) -> None:
    """A run wrote a GRUB drop-in that drops an argument and died before update-grub (grub.cfg
    lacks nothing the baseline wants, so only its age shows it); the next run regenerates
    grub.cfg but may not reboot (no --allow-reboot, or it dies before the reboot): the
    reboot it staged is still owed, and a later run with --allow-reboot does it and verifies."""
    fleet = converged
    rendered = _rendered(fleet, GRUB_DROPIN_PATH)
    old = rendered.replace('GRUB_CMDLINE_LINUX_DEFAULT="', 'GRUB_CMDLINE_LINUX_DEFAULT="sparkbase.test=1 ')
    assert old != rendered
    fleet.sh(NODE, f"cat > {GRUB_DROPIN_PATH} && update-grub", input=old)
    fleet.lab.reboot(NODE)
    fleet.sh(NODE, f"cat > {GRUB_DROPIN_PATH}", input=rendered)  # the cut-short run's write
    assert "sparkbase.test=1" in fleet.sh(NODE, "cat /proc/cmdline")

    assert set(_would(_plan(fleet))) == {"grub-update", "reboot"}
    done = fleet.sparkbase("apply", "--limit", NODE, "--yes", "--json")
    staging = json.loads(done.stdout)["nodes"][0]
    assert staging["status"] == "reboot pending", done.stdout + done.stderr
    assert "grub-update" in _changed(staging)
    assert "sparkbase.test=1" not in fleet.sh(NODE, "cat /boot/grub/grub.cfg")
    assert "sparkbase.test=1" in fleet.sh(NODE, "cat /proc/cmdline")

    owed = _would(_plan(fleet))
    assert set(owed) == {"reboot"}
    assert owed["reboot"]["reasons"] == [f"staged by an earlier apply, not booted yet: {_grub_step(fleet)}"]
    result = _apply(fleet, "--allow-reboot", "--reboot-timeout", "60")
    assert result["status"] == "changed" and result["rebooted"], result
    assert "sparkbase.test=1" not in fleet.sh(NODE, "cat /proc/cmdline")
    assert _would(_plan(fleet)) == {}


def _grub_step(fleet: Fleet) -> str:
    return next(s.name for s in build_steps(load_site(fleet.site), NODE) if s.kind == "grub-update")


def _entry(lines: list[str], node: str) -> int:
    return next(i for i, line in enumerate(lines) if f",{node}," in line.split()[0] + ",")


@pytest.mark.parametrize("output", ["json", "text"])
def test_a_host_key_changed_across_the_reboot_stops_the_wait_at_once(converged: Fleet, output: str) -> None:
    """NODE comes back from its reboot with a key known_hosts does not hold for it (here:
    known_hosts is given another node's key for it while it reboots): apply reports the
    host-key failure as soon as NODE answers, not "did not come back" after the timeout."""
    fleet = converged
    _stale_initramfs(fleet)
    known = fleet.lab.known_hosts_path
    good = known.read_text()
    lines = good.splitlines()
    other = lines[_entry(lines, "spark2")].split()
    lines[_entry(lines, NODE)] = " ".join([lines[_entry(lines, NODE)].split()[0], *other[1:]])
    timeout = 120
    extra = ["--json"] if output == "json" else []
    booted = fleet.lab.booted_at(NODE)
    proc = fleet.popen("apply", "--limit", NODE, "--allow-reboot", "--yes", "--reboot-timeout", str(timeout),
                       *extra)
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        for line in proc.stderr:
            seen.append(line)
            if f"{NODE}: rebooting" in line:
                break
        else:
            pytest.fail("apply ended before it rebooted the node:\n" + "".join(seen))
        known.write_text("\n".join(lines) + "\n")
        started = time.monotonic()
        out, err = proc.communicate(timeout=timeout + 60)
        waited = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        known.write_text(good)
        # apply may see the wrong key before the node even went down: let its reboot end
        # before the next test reaches it
        fleet.lab.wait_booted(NODE, after=booted, timeout=timeout)
    assert proc.returncode == 3, out + err
    assert waited < timeout / 2, f"apply waited {waited:.0f}s: {out}{err}"
    if output == "json":
        result = json.loads(out)["nodes"][0]
        assert result["status"] == "unreachable" and result["failure"] == "host key", result
        assert "host key mismatch" in result["message"] and "did not come back" not in result["message"]
    else:
        assert "host key mismatch" in out and "did not come back" not in out, out + err
    fleet.wait_ssh(NODE)
