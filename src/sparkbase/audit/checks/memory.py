"""Memory checks: THP, sysctls, swap and the memory saver."""

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
from sparkbase.model.memory import BOOT_SWAP_UNIT, SwapSpec


@node_check("memory.thp", "memory", "transparent huge pages in the baseline's mode",
            section="memory")
def memory_thp(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    want = expected.baseline.memory.transparent_hugepages
    return matches(facts, "thp", want, facts.thp,
                   f"set transparent_hugepage={want} on the kernel command line: {apply_fix(at, True)}")


def _sysctl_keys(expected: Expected) -> list[str]:
    return sorted(expected.baseline.memory.sysctls)


@node_check("sysctl", "memory", "each sysctl the baseline sets has its value", items=_sysctl_keys,
            section="memory")
def sysctl(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    key = str(at.item)
    want = expected.baseline.memory.sysctls[key]
    seen = facts.sysctls.get(key)
    if seen is None:
        return unknown(facts, f"sysctl:{key}", want)
    if " ".join(seen.split()) != " ".join(want.split()):
        return fail(want, seen, f"sysctl -w {key}={want} and keep it in sysctl.d: {apply_fix(at)}")
    return ok(want, seen)


@node_check("memory.swap", "memory", "the swap file is active at its size with the right header",
            section="memory")
def memory_swap(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    swap = expected.baseline.memory.swap
    if swap is None:
        return skip("the baseline has no swap file")
    if expected.baseline.memory.swap_by_page_size:
        if facts.page_size is None:
            return unknown(facts, "pagesize", "the swap file for the running page size active")
        other = _other_kernel_swap(swap, expected.baseline.memory.swap_files(), facts, at)
        if other is not None:
            return other
    size = swap.size_gib * 1024**3
    want = f"{swap.path} active, {swap.size_gib} GiB, header page size {swap.header_page_size}"
    entry = next((s for s in facts.swaps if s.name == swap.path), None)
    header = facts.swap_header_page_size.get(swap.path)
    problems = []
    if entry is None:
        problems.append("not active")
    elif entry.size_bytes not in (size, size - swap.header_page_size):
        # the kernel counts the usable area: the file less its header page (real swapon and
        # /proc/swaps show 16 GiB - 64 KiB for a 16 GiB file made with `mkswap -p 65536`)
        problems.append(f"size {entry.size_bytes} bytes")
    if header != swap.header_page_size:
        problems.append(f"header page size {header or 'none (no swap signature)'}")
    if problems:
        return fail(
            want,
            "; ".join(problems),
            f"recreate it (mkswap -p {swap.header_page_size}): {apply_fix(at)}",
        )
    return ok(want, f"{swap.path} active, {size} bytes, header {header}")


def _other_kernel_swap(
    swap: SwapSpec, files: dict[int, str], facts: NodeFacts, at: Subject
) -> Outcome | None:
    """Under a boot unit that chooses by page size (`files`: page size -> swap file), a kernel of
    another page size than the swap file's (the fallback) swaps on the file made for its own:
    judged here (None: the running page size is the swap file's, judged as usual)."""
    running = facts.page_size
    if running == swap.header_page_size:
        return None
    path = files.get(running or 0)
    if path is None:
        return fail(f"a swap file for {running}-byte pages active", "the baseline has none",
                    f"boot a kernel the baseline keeps: {apply_fix(at, True)}")
    want = f"{path} active (the {running}-byte-page kernel's swap; {swap.path} is the " \
           f"{swap.header_page_size}-byte kernel's)"
    active = any(entry.name == path for entry in facts.swaps)
    header = facts.swap_header_page_size.get(path)
    problems = [] if active else ["not active"]
    if header != running:
        problems.append(f"header page size {header or 'none (no swap signature)'}")
    if problems:
        return fail(want, f"{path}: " + "; ".join(problems),
                    f"systemctl start {BOOT_SWAP_UNIT} (it swaps on the file for the running page size); "
                    "a file with the wrong header is the site's to remake (sparkbase never makes the "
                    "installer's swap file)")
    return ok(want, f"{path} active, header {header}")


@node_check("memory.swap.fstab", "memory",
            "the swap file comes back at boot: its /etc/fstab line, or the boot unit that chooses by "
            "page size (then no line activates it: the other kernel would fail on it)",
            section="memory")
def memory_swap_fstab(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    memory = expected.baseline.memory
    if memory.swap is None:
        return skip("the baseline has no swap file")
    path = memory.swap.path
    if memory.swap_by_page_size:
        return _no_auto_line(path, BOOT_SWAP_UNIT, facts, at)
    want = f"{path} none swap sw 0 0"
    if facts.fstab is None:
        return unknown(facts, "fstab", want)
    lines = [e for e in facts.fstab if e.spec == path]
    if not any(e.vfstype == "swap" for e in lines):
        seen = "; ".join(f"{e.spec} {e.file} {e.vfstype} {e.options}" for e in lines) or "not listed"
        fix = f"add the swap line: {apply_fix(at)}"
        return fail(want, seen + " (swap is lost at the next boot)", fix)
    return ok(want, f"{path} listed as swap")


def _no_auto_line(path: str, unit: str, facts: NodeFacts, at: Subject) -> Outcome:
    """No /etc/fstab line activates `path` at boot: `unit` does, on its page size only."""
    want = f"no /etc/fstab line activates {path} ({unit} does, on its page size only)"
    if facts.fstab is None:
        return unknown(facts, "fstab", want)
    auto = [e for e in facts.fstab
            if e.spec == path and e.vfstype == "swap" and "noauto" not in e.options.split(",")]
    if auto:
        return fail(want, f"{path} {auto[0].file} swap {auto[0].options} (fails at boot on the other "
                          "kernel)", f"drop the line or mark it noauto ({apply_fix(at)} drops the line "
                                     "sparkbase wrote)")
    return ok(want, "no line activates it")


@node_check("memory.swap.boot_unit", "memory",
            "the boot unit that swaps on the file for the running page size is enabled",
            section="memory")
def memory_swap_boot_unit(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    memory = expected.baseline.memory
    files = memory.swap_files() if memory.swap_by_page_size else {}
    if not files:
        return skip("swap is not chosen by page size at boot")
    choices = ", ".join(f"{path} on {size}" for size, path in files.items())
    want = f"{BOOT_SWAP_UNIT} enabled ({choices})"
    state = facts.units.get(BOOT_SWAP_UNIT)
    if state is None:
        return unknown(facts, "units", want)
    if state.unit_file_state != "enabled":
        return fail(want, state.unit_file_state or "not installed",
                    f"without it a kernel boots with no swap: {apply_fix(at)}")
    return ok(want, f"enabled, {state.active_state or 'inactive'}")


@node_check(
    "memory.swap.foreign_fstab",
    "memory",
    "no swap file of another baseline is in /etc/fstab (it would come back at boot)",
    severity="warn",
    section="memory",
)
def memory_swap_foreign_fstab(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    foreign_swaps = expected.foreign_swaps
    if not foreign_swaps:
        return skip("no other baseline has a swap file")
    want = "none of " + ", ".join(foreign_swaps)
    if facts.fstab is None:
        return unknown(facts, "fstab", want)
    found = [e.spec for e in facts.fstab if e.spec in foreign_swaps and e.vfstype == "swap"]
    if found:
        return fail(want, [f"{path} (swap)" for path in found],
                    f"retire it (swapoff, drop the fstab line, delete the file): {apply_fix(at)}")
    return ok(want, "none listed")


@node_check(
    "memory.swap.factory",
    "memory",
    "the installer's swap file as kept: noauto in /etc/fstab, or the node's active swap",
    section="memory",
)
def memory_swap_factory(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    factory = expected.baseline.memory.factory_swap
    if factory is None:
        return skip("the baseline leaves the installer's swap file as it finds it")
    path = factory.path
    at_boot = f"{path} not activated at boot (noauto in /etc/fstab)" if factory.fstab == "noauto" \
        else f"{path} activated at boot (/etc/fstab) and active"
    want = at_boot + (", switched off" if factory.swapoff else "")
    if facts.fstab is None:
        return unknown(facts, "fstab", want)
    auto = [e for e in facts.fstab
            if e.spec == path and e.vfstype == "swap" and "noauto" not in e.options.split(",")]
    active = any(entry.name == path for entry in facts.swaps)
    problems = []
    if factory.fstab == "noauto" and auto:
        problems.append(f"/etc/fstab activates it at boot (options {auto[0].options})")
    if factory.fstab == "as-installed":
        if not auto:
            problems.append("/etc/fstab does not activate it at boot")
        if not active:
            problems.append("not active")
    if factory.swapoff and active:
        problems.append("active")
    if problems:
        return fail(want, "; ".join(problems), f"{apply_fix(at)}")
    if factory.fstab == "as-installed":
        return ok(want, f"{path}: activated at boot, active")
    return ok(want, f"{path}: no /etc/fstab line activates it" + (", inactive" if factory.swapoff else ""))


@node_check(
    "memory.swap.factory_foreign",
    "memory",
    "the installer's swap line is not left noauto by another baseline (its swap is lost at boot)",
    severity="warn",
    section="memory",
)
def memory_swap_factory_foreign(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    own = expected.baseline.memory.factory_swap
    paths = tuple(path for path in expected.foreign_fstab_edits if own is None or own.path != path)
    if not paths:
        return skip("no other baseline marks an installer swap line noauto")
    want = ", ".join(paths) + " activated at boot as installed"
    if facts.fstab is None:
        return unknown(facts, "fstab", want)
    found = [f"{e.spec} {e.options}" for e in facts.fstab
             if e.spec in paths and e.vfstype == "swap" and "noauto" in e.options.split(",")]
    if found:
        return fail(want, found, "apply puts back the line sparkbase marked noauto, if nobody changed it "
                                 f"since (else it says kept:): {apply_fix(at)}")
    return ok(want, "no noauto line")



def _saver_items(expected: Expected) -> list[str]:
    saver = expected.baseline.memory.memory_saver
    if saver is None:
        return []
    return ["dkms", "signature", "loaded"] if saver.required else ["loaded"]


@node_check(
    "memory_saver",
    "memory",
    "the memory-saver module is built, signed and loaded (if required)",
    items=_saver_items,
    section="memory",
)
def memory_saver(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    saver = expected.baseline.memory.memory_saver
    if saver is None:
        return skip("no memory-saver module in the baseline")
    loaded_src = facts.nvidia_modules.get(f"{saver.module}.srcversion")
    if not saver.required:
        patched = saver.module in facts.modules and (
            saver.srcversion is None or loaded_src == saver.srcversion)
        if patched:
            return fail("not loaded", "loaded", f"dkms remove {saver.dkms_name}/{saver.dkms_version} --all")
        return ok("not loaded", "not loaded")
    if at.item == "dkms":
        return dkms_installed(at, facts, saver.dkms_name, saver.dkms_version)
    if at.item == "signature":
        return module_signed(at, facts, facts.memory_saver, expected.baseline.secure_boot.mok_fingerprint)
    param = f"{saver.module}.{saver.packing_parameter}"
    want = f"{saver.module} loaded, {saver.packing_parameter}={'on' if saver.packing else 'off'}"
    pending = mok_pending(facts, facts.memory_saver, expected.baseline.secure_boot.mok_fingerprint)
    if saver.module not in facts.modules:
        if pending is not None:
            return pending(want, "not loaded")
        return fail(
            want, "not loaded", "check boot.log / dmesg for a signature refusal; " + apply_fix(at, True)
        )
    if saver.srcversion is not None and loaded_src != saver.srcversion:
        if pending is not None:
            return pending(f"{want}, srcversion {saver.srcversion}", f"srcversion {loaded_src or 'unknown'} "
                           "(the stock module)")
        return fail(
            f"{want}, srcversion {saver.srcversion}",
            f"srcversion {loaded_src or 'unknown'} (the stock module?)",
            "install the patched module for this kernel and reboot: " + apply_fix(at, True),
        )
    value = facts.module_params.get(param)
    if module_flag(value) != saver.packing:
        return fail(want, f"{saver.packing_parameter}={value}", apply_fix(at, True))
    src = f", srcversion {loaded_src}" if saver.srcversion is not None else ""
    return ok(want, f"loaded{src}, {saver.packing_parameter}={value}")
