"""Host checks (section `host`): the recipe's doctor checks of boot and console, nvidia-drm,
the boot target, services, fan control, DGX OS's tuning units, and the OS image.

Boot and console are the recipe's doctor checks (spark-ds41f docs/doctor.md and bin/spark,
0161d716, "Live checks → Host"; scripts/host-recovery, 052248c1): the installed OS first in
the UEFI boot order, a DRM card of the baseline's driver, no process holding that card's DRM
master, the active console in text mode, and systemd's watchdog. Severities and fixes are the
recipe's: where the recipe only warns that it could not read a fact (DRM clients, console
mode), a `.readable` check warns and the error check skips.

DGX OS's tuning units a baseline drives: the CPU governor (nv-cpu-governor.service) and NVMe
interrupt coalescing (nvidia-nvme-interrupt-coalescing.service, feature 0x08). Both are
warnings, as the recipe's doctor grades them (spark-ds41f docs/doctor.md, 0161d716:
"`cpupower` for the 64 KiB kernel and the `performance` CPU governor" and "NVMe interrupt
coalescing off" are warn); that the nodes agree on a governor stays an error
(`fleet.governor`).
"""

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
from sparkbase.facts.model import NodeFacts, UnitState
from sparkbase.facts.parsers.cpuset import format_cpu_list
from sparkbase.facts.parsers.host import EfiBoot
from sparkbase.facts.parsers.os_release import dgx_os_version
from sparkbase.model.host import (
    GOVERNOR_UNIT,
    NVME_COALESCING_SCRIPT,
    NVME_COALESCING_UNIT,
    coalescing_value,
)

#: the manager properties the watchdog check reads, in the order shown
WATCHDOG_PROPERTIES = ("RuntimeWatchdogUSec", "RebootWatchdogUSec")


def bootorder_fix(boot: EfiBoot, first: str) -> str:
    """The recipe's printed fix: `sudo efibootmgr --bootorder FIRST,OTHERS` (the others in
    their present order)."""
    others = [number for number in boot.order if number != first]
    return f"sudo efibootmgr --bootorder {','.join([first, *others])}"


@node_check("host.uefi_first", "host", "the installed OS is first in the UEFI boot order",
            severity="warn", section="host")
def host_uefi_first(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    label = expected.baseline.host.uefi_first
    if label is None:
        return skip("the baseline does not judge the UEFI boot order")
    want = f"'{label}' first in BootOrder"
    boot = facts.efi_boot
    if boot is None:
        return unknown(facts, "efibootmgr", want)
    entry = boot.find(label)
    first = boot.entry(boot.order[0]) if boot.order else None
    seen = (f"Boot{first.number} '{first.label}' first" if first is not None
            else f"Boot{boot.order[0]} first (no such entry)" if boot.order else "no BootOrder")
    if entry is None:
        labels = ", ".join(f"'{e.label}'" for e in boot.entries) or "none"
        return fail(want, f"{seen}; no entry labelled '{label}' (entries: {labels})",
                    "no installed-OS boot entry exists; reinstall the boot loader with grub-install")
    if first is None or first.number != entry.number:
        return fail(want, seen + " (a network entry first costs about a minute of DHCP timeouts "
                    "at every boot)", bootorder_fix(boot, entry.number))
    return ok(want, seen)


@node_check("host.drm_card", "host", "a DRM card belongs to the baseline's driver", section="host")
def host_drm_card(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    driver = expected.baseline.host.drm_driver
    if driver is None:
        return skip("the baseline names no DRM driver")
    want = f"a DRM card of the {driver} driver"
    if "drm-drivers" in facts.errors:
        return unknown(facts, "drm-drivers", want)
    cards = facts.drm_drivers
    seen = ", ".join(f"{card}: {name}" for card, name in sorted(cards.items())) or "no DRM card with a driver"
    if driver not in cards.values():
        return fail(want, seen, "check that nvidia-drm loaded with modeset=Y (ls -l /dev/dri/by-path)")
    return ok(want, seen)


@node_check("host.console_text", "host", "the active virtual console is in text mode", section="host")
def host_console_text(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    if not expected.baseline.host.console_text:
        return skip("the baseline does not judge the console mode")
    want = "active console in text mode (KDGETMODE 0)"
    console = facts.console
    if console is None:
        return skip(f"the console mode could not be read ({facts.errors.get('console', 'not reported')}): "
                    "host.console_text.readable warns")
    seen = f"{console.vt} in {console.name} mode (KDGETMODE {console.mode})"
    if console.mode != 0:
        return fail(want, seen, f"switch {console.vt} to text mode (KDSETMODE KD_TEXT on /dev/{console.vt}; "
                    "the recipe's scripts/host-recovery apply does it) and boot without splash: an "
                    "attached display shows nothing")
    return ok(want, seen)


@node_check("host.console_text.readable", "host", "the active console's mode can be read",
            severity="warn", section="host")
def host_console_readable(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    if not expected.baseline.host.console_text:
        return skip("the baseline does not judge the console mode")
    if facts.console is None:
        return unknown(facts, "console", "KDGETMODE of /dev/$(cat /sys/class/tty/tty0/active)")
    return ok("readable", f"{facts.console.vt}: KDGETMODE {facts.console.mode}")


def _drm_cards(expected: Expected, facts: NodeFacts) -> list[str] | Outcome:
    """The node's cards of the baseline's DRM driver; a skip when there is none to judge (the
    baseline names no driver, or host.drm_card fails)."""
    driver = expected.baseline.host.drm_driver
    if driver is None:
        return skip("the baseline names no DRM driver")
    cards = sorted(card for card, name in facts.drm_drivers.items() if name == driver)
    return cards or skip(f"no DRM card of the {driver} driver (host.drm_card says so)")


@node_check("host.drm_master", "host", "no process holds DRM master of the baseline driver's card",
            section="host")
def host_drm_master(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    cards = _drm_cards(expected, facts)
    if isinstance(cards, Outcome):
        return cards
    clients = {card: facts.drm_clients.get(card) for card in cards}
    if any(found is None for found in clients.values()):
        return skip("the DRM clients could not be read: host.drm_master.readable warns")
    masters = [f"{c.command}/{c.pid} ({card})"
               for card, found in clients.items() for c in found or () if c.master]
    want = "no DRM master"
    if masters:
        return fail(want, f"{', '.join(masters)} holds DRM master, so the text console cannot draw",
                    "stop or restart that process (the serving worker releases the device right "
                    "after startup)")
    return ok(want, f"{sum(len(found or ()) for found in clients.values())} client(s), none master")


@node_check("host.drm_master.readable", "host", "the DRM clients of the baseline driver's card can be read",
            severity="warn", section="host")
def host_drm_master_readable(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    cards = _drm_cards(expected, facts)
    if isinstance(cards, Outcome):
        return cards
    want = " ".join(f"/sys/kernel/debug/dri/{card.removeprefix('card')}/clients" for card in cards)
    if "drm-clients" in facts.errors:
        return unknown(facts, "drm-clients", want)
    unread = [card for card in cards if facts.drm_clients.get(card) is None]
    if unread:
        return fail(want + " readable", f"cannot read the DRM clients of {', '.join(unread)}",
                    "read as root with debugfs mounted (mount -t debugfs none /sys/kernel/debug)")
    return ok(want + " readable", "readable")


@node_check("host.watchdog", "host", "systemd's runtime and reboot watchdogs are armed as the baseline says",
            section="host")
def host_watchdog(expected: Expected, facts: NodeFacts, _at: Subject) -> Outcome:
    watchdog = expected.baseline.host.watchdog
    if watchdog is None:
        return skip("the baseline does not judge systemd's watchdog")
    runtime, reboot = watchdog.runtime, watchdog.reboot
    wanted = dict(zip(WATCHDOG_PROPERTIES, (runtime, reboot), strict=True))
    want = " ".join(f"{key}={value}" for key, value in wanted.items())
    if not facts.watchdog:
        return unknown(facts, "watchdog", want)
    seen = " ".join(f"{key}={facts.watchdog.get(key, '(not shown)')}" for key in WATCHDOG_PROPERTIES)
    if any(facts.watchdog.get(key) != value for key, value in wanted.items()):
        return fail(want, seen, f"set RuntimeWatchdogSec={runtime} and RebootWatchdogSec={reboot} in a "
                    "/etc/systemd/system.conf.d/ drop-in, then sudo systemctl daemon-reexec (the recipe's "
                    "scripts/host-recovery apply installs its 95-spark-recovery.conf)")
    return ok(want, seen)



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


def governors_seen(governors: dict[int, str]) -> str:
    """`performance on CPUs 0-19` (one group per governor, most CPUs first)."""
    by_governor: dict[str, set[int]] = {}
    for cpu, governor in governors.items():
        by_governor.setdefault(governor, set()).add(cpu)
    groups = sorted(by_governor.items(), key=lambda item: (-len(item[1]), item[0]))
    return "; ".join(f"{governor} on CPUs {format_cpu_list(frozenset(cpus))}" for governor, cpus in groups)


def _unit_seen(state: UnitState | None) -> str:
    if state is None or not state.unit_file_state:
        return "not installed"
    return f"{state.unit_file_state}, {state.active_state or 'inactive'}"


@node_check("host.governor", "host", "every CPU runs the baseline's frequency governor", severity="warn",
            section="host")
def host_governor(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    want = expected.baseline.host.cpu_governor
    if want is None:
        return skip("the baseline does not manage the CPU governor")
    wanted = f"{want} on every CPU"
    if not facts.governors:
        return unknown(facts, "governors", wanted)
    seen = governors_seen(facts.governors)
    if any(governor != want for governor in facts.governors.values()):
        unit = facts.units.get(GOVERNOR_UNIT)
        if unit is not None and unit.active_state == "failed":
            fix = (f"{GOVERNOR_UNIT} failed: cpupower needs linux-tools-{facts.kernel_release}; "
                   + apply_fix(at))
        else:
            fix = f"systemctl restart {GOVERNOR_UNIT}: {apply_fix(at)}"
        return fail(wanted, seen, fix)
    return ok(wanted, seen)


@node_check("host.governor_unit", "host", "DGX OS's governor unit is enabled and did not fail",
            severity="warn", section="host")
def host_governor_unit(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    if expected.baseline.host.cpu_governor is None:
        return skip("the baseline does not manage the CPU governor")
    want = f"{GOVERNOR_UNIT} enabled, not failed"
    state = facts.units.get(GOVERNOR_UNIT)
    if state is None:
        return unknown(facts, "units", want)
    seen = _unit_seen(state)
    if state.active_state == "failed":
        return fail(want, seen, f"cpupower failed: install linux-tools-{facts.kernel_release} (kernel.tools),"
                                f" then systemctl restart {GOVERNOR_UNIT}: {apply_fix(at)}")
    if not state.enabled:
        return fail(want, seen, f"systemctl enable {GOVERNOR_UNIT} (sparkbase does not re-enable a "
                                "vendor unit someone turned off: do it by hand)")
    return ok(want, seen)


def coalescing_wanted(on: bool) -> str:
    """What the check expects, in words."""
    if on:
        return f"feature 0x08 = 0x107 (coalescing on), {NVME_COALESCING_UNIT} enabled"
    return f"feature 0x08 = 0 (coalescing off), {NVME_COALESCING_UNIT} masked"


@node_check("host.nvme_coalescing", "host", "NVMe interrupt coalescing is as the baseline says",
            severity="warn", section="host")
def host_nvme_coalescing(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    on = expected.baseline.host.nvme.interrupt_coalescing
    want = coalescing_wanted(on)
    if facts.nvme_coalescing is None:
        return unknown(facts, "nvme-coalescing", want)
    state = facts.units.get(NVME_COALESCING_UNIT)
    value = facts.nvme_coalescing
    seen = f"feature 0x08 = {value:#x}, {NVME_COALESCING_UNIT} {_unit_seen(state)}"
    file_state = state.unit_file_state if state is not None else ""
    if on:
        if value != coalescing_value(True) or state is None or not state.enabled:
            return fail(want, seen, f"unmask, enable and start {NVME_COALESCING_UNIT}: {apply_fix(at)}")
        return ok(want, seen)
    # off: the unit must not be able to turn it back on at boot (absent counts as masked)
    if value != coalescing_value(False) or file_state not in ("", "masked"):
        return fail(want, seen, f"systemctl mask --now {NVME_COALESCING_UNIT}; "
                                f"{NVME_COALESCING_SCRIPT} disable: {apply_fix(at)}")
    return ok(want, seen)
