"""The host section (and the `os:` release) from a live node."""

from __future__ import annotations

import re

from sparkbase.capture.core import Collector, dkms_build, dkms_version, yes
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.os_release import dgx_os_version
from sparkbase.model.baseline import Baseline
from sparkbase.model.host import coalescing_value
from sparkbase.model.kernel import TOOLS_PACKAGE_STEM

_OS_RELEASE = re.compile(r"^[A-Za-z0-9._-]{1,40}$")


def os_release(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """`os.release`: the DGX OS release /etc/dgx-release names."""
    seen_os = dgx_os_version(facts.dgx_release) if facts.dgx_release is not None else None
    out.put(("os", "release"), _os_release(seen_os, baseline.os.release), "/etc/dgx-release names no release")


def _os_release(seen: str | None, pinned: str) -> str | None:
    """`DGX OS <version>` the node runs; the pinned release line when it covers that version
    (as the audit matches them: `DGX OS 7.5` covers 7.5.0), so a line is not narrowed."""
    if not seen or not _OS_RELEASE.match(seen):
        return None
    line = pinned.split()[-1]
    return pinned if seen == line or seen.startswith(line + ".") else f"DGX OS {seen}"


def capture(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """Boot target, display manager, nvidia-drm, fans, NVMe, governor, services and packages."""
    host = baseline.host
    target = facts.default_target
    out.put(("host", "boot_target"),
            target if target in {"multi-user.target", "graphical.target"} else None,
            f"systemctl get-default: {target or 'no answer'}")
    manager = facts.units.get("display-manager.service")
    out.put(("host", "display_manager"), None if manager is None else manager.active,
            "display-manager.service state unreadable")
    for param in ("modeset", "fbdev"):
        out.put(("host", "nvidia_drm", param), yes(facts.module_params.get(f"nvidia_drm.{param}")),
                "nvidia_drm is not loaded")
    _nvidia_drm_purge(facts, baseline, out)
    _fan_control(facts, baseline, out)
    _nvme_coalescing(facts, out)
    _cpu_governor(facts, baseline, out)
    if host.disable_services and facts.units:
        kept = [unit for unit in host.disable_services
                if unit in facts.units and not facts.units[unit].enabled and not facts.units[unit].active]
        out.dropped += [f"host.disable_services: {unit} (enabled or running on the node)"
                        for unit in host.disable_services if unit not in kept]
        out.put(("host", "disable_services"), kept, "")
    if host.packages:
        pins = [{"name": pin.name, "version": facts.packages.get(pin.name)} for pin in host.packages]
        if all(pin["version"] for pin in pins):
            out.put(("host", "packages"), pins, "")
        else:
            out.missing.append("host.packages: not every package is installed")


def _nvidia_drm_purge(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """`host.nvidia_drm.purge`: kept where the options package is gone; dropped where the
    node still has it installed."""
    purge = baseline.host.nvidia_drm.purge
    if purge is None:
        return
    if "dpkg" in facts.errors and not facts.packages:
        out.missing.append("host.nvidia_drm.purge: the installed packages were not read")
        return
    version = facts.packages.get(purge)
    if version is not None:
        out.dropped.append(f"host.nvidia_drm.purge: {purge} (installed on the node, {version})")
        out.put_null(("host", "nvidia_drm", "purge"))
    else:
        out.put(("host", "nvidia_drm", "purge"), purge, "")


def _fan_control(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """The fan-control DKMS module: package and DKMS versions, the module loaded, its daemon
    enabled and running (the names are kept where the node confirms them)."""
    fan = baseline.host.fan_control
    if fan is None:
        return
    out.put(("host", "fan_control", "package_version"), facts.packages.get(fan.package),
            f"{fan.package} is not installed")
    dkms_build(("host", "fan_control"), fan.dkms_name, dkms_version(facts, fan.dkms_name), facts, out)
    out.put(("host", "fan_control", "module"), fan.module if fan.module in facts.modules else None,
            f"{fan.module} is not loaded")
    state = facts.units.get(fan.service)
    running = state is not None and state.enabled and state.active
    out.put(("host", "fan_control", "service"), fan.service if running else None,
            f"{fan.service} is not enabled and active")


def _nvme_coalescing(facts: NodeFacts, out: Collector) -> None:
    """`host.nvme.interrupt_coalescing`: NVMe feature 0x08 is DGX OS's default (on) or 0 (off)."""
    value = facts.nvme_coalescing
    known = {coalescing_value(True): True, coalescing_value(False): False}
    out.put(("host", "nvme", "interrupt_coalescing"), None if value is None else known.get(value),
            "feature 0x08 unread" if value is None
            else f"feature 0x08 = {value:#x}, neither on (0x107) nor off")


def _cpu_governor(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """`host.cpu_governor`: performance when every CPU runs it and the kernel's linux-tools
    is installed (DGX OS's unit keeps it so); else not managed (null)."""
    if not facts.governors:
        out.missing.append("host.cpu_governor: no CPU reported a scaling governor")
        return
    seen = set(facts.governors.values())
    tools_package = f"{TOOLS_PACKAGE_STEM}-{facts.kernel_release}"
    tools = facts.kernel_release is not None and tools_package in facts.packages
    if seen == {"performance"} and tools:
        out.put(("host", "cpu_governor"), "performance", "")
        return
    if baseline.host.cpu_governor is not None:
        why = (f"the CPUs run {', '.join(sorted(seen))}" if seen != {"performance"}
               else f"{tools_package} is not installed")
        out.dropped.append(f"host.cpu_governor: {baseline.host.cpu_governor} ({why})")
    out.put_null(("host", "cpu_governor"))
