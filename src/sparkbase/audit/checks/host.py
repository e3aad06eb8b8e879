"""Host checks: nvidia-drm, boot target, services, fan control, the serving slice, the OS image."""

from __future__ import annotations

from sparkbase.audit.checks.common import (
    apply_fix,
    dkms_installed,
    matches,
    module_flag,
    module_signed,
    mok_pending,
    unknown,
)
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers import dgx_os_version, format_cpu_list


@node_check("host.nvidia_drm", "host", "nvidia-drm modeset and fbdev as the baseline says", section="host")
def host_nvidia_drm(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    drm = expected.baseline.host.nvidia_drm
    want = f"modeset={'Y' if drm.modeset else 'N'} fbdev={'Y' if drm.fbdev else 'N'}"
    modeset, fbdev = (
        facts.module_params.get("nvidia_drm.modeset"),
        facts.module_params.get("nvidia_drm.fbdev"),
    )
    seen = f"modeset={modeset or '?'} fbdev={fbdev or '?'}"
    if module_flag(modeset) != drm.modeset or module_flag(fbdev) != drm.fbdev:
        return fail(want, seen, "write modprobe.d and reboot: " + apply_fix(at, True))
    return ok(want, seen)


@node_check("host.boot_target", "host", "the default systemd target is the baseline's",
            section="host")
def host_boot_target(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    want = expected.baseline.host.boot_target
    return matches(facts, "default-target", want, facts.default_target,
                   f"systemctl set-default {want}: {apply_fix(at)}")


@node_check("host.display_manager", "host", "no display manager runs on a headless node",
            section="host")
def host_display_manager(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    if expected.baseline.host.display_manager:
        return skip("the baseline allows a display manager")
    state = facts.units.get("display-manager.service")
    if state is None:
        return unknown(facts, "units", "inactive")
    if state.active:
        return fail("inactive", state.active_state, "disable the display manager: " + apply_fix(at))
    return ok("inactive", state.active_state or "inactive")


def _disabled_units(expected: Expected) -> list[str]:
    return list(expected.baseline.host.disable_services)


@node_check(
    "service", "host", "each unit the baseline disables is disabled and stopped", items=_disabled_units,
    section="host",
)
def service_disabled(_expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    item = at.item
    state = facts.units.get(str(item))
    if state is None:
        return unknown(facts, "units", "disabled, inactive")
    if not state.unit_file_state and not state.active:
        # systemd shows no unit file state for a unit it cannot find: nothing to disable
        return ok("disabled, inactive", "absent (no such unit on the node)")
    seen = f"{state.unit_file_state or 'no unit file'}, {state.active_state or 'inactive'}"
    if state.unit_file_state == "enabled" or state.active:
        return fail("disabled, inactive", seen, f"systemctl disable --now {item}: {apply_fix(at)}")
    return ok("disabled, inactive", seen)


def _fan_items(expected: Expected) -> list[str]:
    if expected.baseline.host.fan_control is None:
        return []
    signs = expected.baseline.secure_boot.enabled
    return ["dkms", *(["signature"] if signs else []), "loaded", "service"]


@node_check(
    "host.fan_control",
    "host",
    "the fan-control module is built for the running kernel, signed, loaded, and its daemon runs",
    items=_fan_items,
    section="host",
)
def host_fan_control(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    fan = expected.baseline.host.fan_control
    if fan is None:
        return skip("the baseline has no fan control")
    if at.item == "dkms":
        return dkms_installed(at, facts, fan.dkms_name, fan.dkms_version)
    if at.item == "signature":
        return module_signed(at, facts, facts.fan_control, expected.baseline.secure_boot.mok_fingerprint)
    if at.item == "loaded":
        if fan.module not in facts.modules:
            pending = mok_pending(facts, facts.fan_control, expected.baseline.secure_boot.mok_fingerprint)
            if pending is not None:
                return pending(f"{fan.module} loaded", "not loaded")
            return fail(f"{fan.module} loaded", "not loaded",
                        f"{fan.modules_load_path} loads it at boot (check dmesg for a signature refusal): "
                        + apply_fix(at, True))
        return ok(f"{fan.module} loaded", "loaded")
    state = facts.units.get(fan.service)
    want = f"{fan.service} enabled, active"
    if state is None:
        return unknown(facts, "units", want)
    seen = f"{state.unit_file_state or 'not installed'}, {state.active_state or 'inactive'}"
    if not (state.enabled and state.active):
        return fail(want, seen, f"install {fan.package} and enable {fan.service}: {apply_fix(at)}")
    return ok(want, seen)


@node_check("host.nvidia_drm.purge", "host",
            "DGX OS's nvidia-drm modeset options package is gone where the baseline purges it",
            section="host")
def host_nvidia_drm_purge(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    purge = expected.baseline.host.nvidia_drm.purge
    if purge is None:
        return skip("the baseline purges no nvidia-drm options package")
    if "dpkg" in facts.errors and not facts.packages:
        return unknown(facts, "dpkg", f"{purge} not installed")
    version = facts.packages.get(purge)
    if version is not None:
        return fail(f"{purge} not installed", f"{purge} {version} installed",
                    "purge it and rebuild the initramfs (update-initramfs -u -k all): "
                    + apply_fix(at, True))
    return ok(f"{purge} not installed", "not installed")



@node_check("cpuset.slice", "cpuset", "the serving slice is pinned to the fast cores", section="cpuset")
def cpuset_slice(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    cpuset = expected.baseline.cpuset
    if cpuset.pinned_by != "slice":
        return skip("lanes are pinned by their containers' --cpuset-cpus (cpuset.pinned_by: container): "
                    "runtime.affinity judges each lane process's CPUs")
    cpus = frozenset(cpuset.cpus)
    want = f"{cpuset.slice} AllowedCPUs={cpuset.cpulist()}"
    seen = facts.slice_allowed_cpus
    if seen is None and "units" in facts.errors:
        return unknown(facts, "units", want)
    if seen != cpus:
        shown = format_cpu_list(seen) if seen else "(unset)"
        return fail(want, f"AllowedCPUs={shown}", f"write the slice: {apply_fix(at)}")
    if facts.fast_cpus and not cpus <= set(facts.fast_cpus):
        slow = sorted(cpus - set(facts.fast_cpus))
        return fail(want, f"CPUs {slow} are not Cortex-X925 (CPU part 0xd85) here", "fix cpuset.cpus")
    return ok(want, f"AllowedCPUs={format_cpu_list(seen)}")



@node_check("os.release", "host", "the node runs the DGX OS release the baseline was qualified on",
            severity="warn", section=None)
def os_release(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    want = expected.baseline.os.release
    wanted = want.split()[-1]  # "DGX OS 26.09" -> "26.09" (a release line: 26.09.x matches)
    if facts.dgx_release is None:
        return fail(want, f"unknown ({facts.errors.get('dgx-release', '/etc/dgx-release missing')})",
                    "not a DGX OS image? check /etc/dgx-release by hand")
    seen = dgx_os_version(facts.dgx_release)
    if seen is None:
        return fail(want, "no DGX_OTA_VERSION or DGX_SWBUILD_VERSION in /etc/dgx-release",
                    "check /etc/dgx-release by hand")
    if seen != wanted and not seen.startswith(wanted + "."):
        if _calendar_numbered(wanted) != _calendar_numbered(seen):
            return fail(want, f"DGX OS {seen} (/etc/dgx-release numbers releases {seen.split('.')[0]}.x; "
                              f"the baseline's {wanted} is another numbering)",
                        "name os.release as /etc/dgx-release does (DGX_OTA_VERSION, e.g. "
                        f"'DGX OS {'.'.join(seen.split('.')[:2])}'): site to confirm which release that is")
        return fail(want, f"DGX OS {seen}",
                    f"update the OS image to {want} (DGX OS OTA; sparkbase does not change the OS)")
    return ok(want, f"DGX OS {seen}")


def _calendar_numbered(version: str) -> bool:
    """`26.09` (year.month, as release notes name DGX OS) rather than `7.5.0` (as
    /etc/dgx-release's DGX_OTA_VERSION does)."""
    major = version.split(".")[0]
    return major.isdigit() and int(major) >= 20
