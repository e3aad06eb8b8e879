"""The memory section from a live node: THP, sysctls, swap, the installer's swap, the memory saver."""

from __future__ import annotations

from sparkbase.capture.core import Collector, dkms_build, dkms_version, yes
from sparkbase.facts.model import NodeFacts
from sparkbase.model.baseline import Baseline


def capture(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """THP, sysctls, swap files and the memory saver."""
    memory = baseline.memory
    out.put(("memory", "transparent_hugepages"), facts.thp, "THP mode unreadable")
    if memory.sysctls:
        sysctls = {key: facts.sysctls.get(key) for key in memory.sysctls}
        unread = sorted(key for key, value in sysctls.items() if value is None)
        if unread:
            out.missing.append(f"memory.sysctls: {', '.join(unread)} unreadable")
        else:
            out.put(("memory", "sysctls"), {k: _number_or_text(str(v)) for k, v in sysctls.items()}, "")
    if memory.swap is not None:
        _swap(facts, memory.swap.path, out)
    _factory_swap(facts, baseline, out)
    _memory_saver(facts, baseline, out)


def _swap(facts: NodeFacts, path: str, out: Collector) -> None:
    """The swap file's size and header page size, when it is active."""
    active = next((swap for swap in facts.swaps if swap.name == path), None)
    header = facts.swap_header_page_size.get(path)
    if active is None or header is None:
        out.missing.append(f"memory.swap: {path} is not an active swap file with a readable header")
        return
    gib = round((active.size_bytes + header) / 2**30)  # swapon's size is the file less its header page
    out.put(("memory", "swap", "size_gib"), gib, "")
    out.put(("memory", "swap", "header_page_size"), header, "")


def _factory_swap(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """`memory.factory_swap.fstab`: the installer's swap line as /etc/fstab has it (noauto, or
    as installed); a baseline that leaves the file alone still leaves it."""
    factory = baseline.memory.factory_swap
    if factory is None:
        return
    if facts.fstab is None:
        out.missing.append("memory.factory_swap: /etc/fstab was not read")
        return
    lines = [entry for entry in facts.fstab if entry.spec == factory.path and entry.vfstype == "swap"]
    if not lines:
        out.missing.append(f"memory.factory_swap: /etc/fstab has no swap line for {factory.path}")
        return
    noauto = all("noauto" in entry.options.split(",") for entry in lines)
    out.put(("memory", "factory_swap", "fstab"), "noauto" if noauto else "as-installed", "")
    if not noauto and factory.swapoff:  # swapoff goes with noauto only
        out.put(("memory", "factory_swap", "swapoff"), False, "")


def _memory_saver(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """The patched nvidia-uvm: its DKMS version (its source checkout is the baseline's pin),
    and the loaded module's srcversion and packing flag, when the module loaded is the one
    DKMS built (modinfo of the file the kernel loads has the loaded srcversion)."""
    saver = baseline.memory.memory_saver
    if saver is None or not saver.required:
        return
    dkms = dkms_version(facts, saver.dkms_name)
    dkms_build(("memory", "memory_saver"), saver.dkms_name, dkms, facts, out)
    loaded = facts.nvidia_modules.get(f"{saver.module}.srcversion")
    built = facts.memory_saver.srcversion if facts.memory_saver is not None else None
    patched = dkms is not None and loaded is not None and loaded == built
    if patched:
        out.put(("memory", "memory_saver", "module"), saver.module, "")
    out.put(("memory", "memory_saver", "srcversion"), loaded if patched else None,
            f"{saver.module} loaded ({loaded or 'no srcversion'}) is not the DKMS build"
            f" ({built or 'modinfo gave none'})")
    packing = yes(facts.module_params.get(f"{saver.module}.{saver.packing_parameter}"))
    out.put(("memory", "memory_saver", "packing"), packing if patched else None,
            f"{saver.packing_parameter} unreadable, or the module is not the DKMS build")


def _number_or_text(value: str) -> object:
    """A sysctl value as YAML would hold it: digits as an int (as baselines write them)."""
    return int(value) if value.isdigit() and len(value) < 19 else value
