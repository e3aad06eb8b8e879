"""Kernel checks: running release, page size, command line, GRUB default."""

from __future__ import annotations

from sparkbase.audit.checks.common import APST_ARG, apply_fix, matches, unknown
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.model.cmdline import rendered_kernel_args


def _cmdline(expected: Expected) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The kernel arguments the baseline requires, and those it forbids."""
    baseline = expected.baseline
    kernel = baseline.kernel
    if not baseline.manages("kernel"):
        # as found: sparkbase renders no command line, so only what the baseline names is
        # required, and the typed arguments no other check judges: THP is judged live
        # (memory.thp), NVMe APST only here
        apst = (APST_ARG,) if baseline.host.nvme.apst == "disabled" else ()
        return (*kernel.cmdline_add, *apst), tuple(kernel.cmdline_forbid)
    return tuple(rendered_kernel_args(baseline)), tuple(kernel.cmdline_forbid)


@node_check("kernel.release", "kernel", "the running kernel is the baseline's",
            section="kernel")
def kernel_release(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    return matches(facts, "uname", expected.baseline.kernel.release, facts.kernel_release,
                   f"install and boot it: {apply_fix(at, reboot=True)}")


@node_check("kernel.page_size", "kernel", "the running page size is the baseline's",
            section="kernel")
def kernel_page_size(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    return matches(facts, "pagesize", expected.baseline.kernel.page_size, facts.page_size,
                   f"boot the baseline's kernel flavour: {apply_fix(at, True)}")


@node_check("kernel.cmdline", "kernel", "required kernel arguments present, forbidden ones absent",
            section="kernel")
def kernel_cmdline_check(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    return cmdline_outcome(*_cmdline(expected), facts, at)


def cmdline_outcome(required: tuple[str, ...], forbidden: tuple[str, ...], facts: NodeFacts,
                    at: Subject) -> Outcome:
    """The `required` arguments on the node's command line, none of the `forbidden` ones."""
    if not facts.cmdline:
        return unknown(facts, "cmdline", " ".join(required))
    missing = [arg for arg in required if arg not in facts.cmdline]
    present = [arg for arg in facts.cmdline if _forbidden(arg, forbidden)]
    want = " ".join(required) + (f" (never: {' '.join(forbidden)})" if forbidden else "")
    if missing or present:
        problems = [*(f"missing {arg}" for arg in missing), *(f"forbidden {arg}" for arg in present)]
        fix = f"rewrite the GRUB drop-in and reboot: {apply_fix(at, True)}"
        if APST_ARG in missing:
            fix = (f"NVMe APST is not pinned off ({APST_ARG} missing; APST sleep costs about 3% "
                   f"at 8 streams): {fix}")
        return fail(want, "; ".join(problems), fix)
    return ok(want, " ".join(facts.cmdline))


@node_check(
    "kernel.fallback", "kernel", "the fallback kernel is installed at its version, with a GRUB menu entry",
    section="kernel",
)
def kernel_fallback(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    fallback = expected.baseline.kernel.fallback
    if fallback is None:
        return skip("the baseline keeps no fallback kernel")
    image = f"linux-image-{fallback.release}"
    want = (f"{image} {fallback.package_version} installed, with a GRUB entry "
            "(the default stays the baseline's)")
    if facts.grub is None:
        return unknown(facts, "grub-cfg", want)
    problems = []
    seen = facts.packages.get(image)
    if seen != fallback.package_version:
        problems.append(f"{image} {seen or 'not installed'}")
    if not any(e.release == fallback.release and not e.recovery for e in facts.grub.entries):
        problems.append(f"no GRUB entry for {fallback.release}")
    if problems:
        return fail(want, "; ".join(problems),
                    f"install it, hold it and run update-grub: {apply_fix(at)}")
    return ok(want, f"{image} {seen}, in the GRUB menu")


def _forbidden(arg: str, forbidden: tuple[str, ...]) -> bool:
    """`arg` is forbidden by name (`splash`) or exactly (`kho=off`)."""
    return arg in forbidden or any("=" not in rule and arg.split("=")[0] == rule for rule in forbidden)


@node_check(
    "boot.grub_default", "kernel", "GRUB has an entry for the kernel and boots it next and by default",
    section="kernel",
)
def boot_grub_default(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    release = expected.baseline.kernel.release
    want = f"an entry for {release}; the next and the normal boot take it"
    grub = facts.grub
    if grub is None:
        return unknown(facts, "grub-cfg", want)
    reapply = f"rewrite the GRUB drop-in and run update-grub: {apply_fix(at)}"
    if not any(e.release == release and not e.recovery for e in grub.entries):
        booted = sorted({e.release for e in grub.entries if e.release})
        return fail(want, f"no GRUB entry for {release} (entries: {', '.join(booted) or 'none'})",
                    f"install the kernel and run update-grub: {apply_fix(at, True)}")
    problems: list[str] = []
    fixes: list[str] = []
    if grub.oneshot is not None and (grub.oneshot_entry is None or grub.oneshot_entry.release != release):
        boots = grub.oneshot_entry.release if grub.oneshot_entry else "no entry (GRUB falls back to entry 0)"
        problems.append(f"one-shot next_entry {grub.oneshot!r} (grub-reboot) boots {boots} next")
        fixes.append("grub-editenv /boot/grub/grubenv unset next_entry")
    if grub.default_entry is None or grub.default_entry.release != release:
        boots = grub.default_entry.release if grub.default_entry else "no such entry (GRUB falls back to 0)"
        problems.append(f"default {grub.default!r} boots {boots}")
        fixes.append(reapply)
    if problems:
        return fail(want, "; ".join(problems) + " (the next reboot changes kernel)", "; then ".join(fixes))
    return ok(want, f"default {grub.default!r} boots {release}")
