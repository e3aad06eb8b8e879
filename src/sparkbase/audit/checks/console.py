"""The recipe's doctor checks of boot and console (spark-ds41f docs/doctor.md and bin/spark,
0161d716, "Live checks → Host"; scripts/host-recovery, 052248c1): the installed OS first in the
UEFI boot order, a DRM card of the baseline's driver, no process holding that card's DRM
master, the active console in text mode, and systemd's watchdog. Severities and fixes are the
recipe's: where the recipe only warns that it could not read a fact (DRM clients, console
mode), a `.readable` check warns and the error check skips."""

from __future__ import annotations

from sparkbase.audit.checks.common import unknown
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers import EfiBoot

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
