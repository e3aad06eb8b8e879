"""The kernel section from a live node: release, page size, packages, command line, fallback, GRUB."""

from __future__ import annotations

from sparkbase.capture.core import Collector
from sparkbase.facts.model import NodeFacts
from sparkbase.model.baseline import Baseline
from sparkbase.model.kernel import TOOLS_PACKAGE_STEM


def capture(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """Release, page size, package version, command line, tools, fallback and GRUB default."""
    release = facts.kernel_release
    out.put(("kernel", "release"), release, "uname -r gave no answer")
    out.put(("kernel", "page_size"), facts.page_size, "getconf PAGESIZE gave no answer")
    if release is not None:
        out.put(("kernel", "package_version"), facts.packages.get(f"linux-image-{release}"),
                f"linux-image-{release} is not installed")
    carried = set(facts.cmdline)
    if facts.cmdline:
        kept = [arg for arg in baseline.kernel.cmdline_add if arg in carried]
        out.dropped += [f"kernel.cmdline_add: {arg} (not on /proc/cmdline)"
                        for arg in baseline.kernel.cmdline_add if arg not in carried]
        out.put(("kernel", "cmdline_add"), kept, "")
    else:
        out.missing.append("kernel.cmdline_add: /proc/cmdline was not read")
    _kernel_tools(facts, baseline, out)
    _fallback(facts, baseline, out)
    grub = facts.grub
    if grub is not None and release is not None:
        entry = grub.default_entry
        out.put(("kernel", "pin_grub_default"), entry is not None and entry.release == release, "")
    else:
        out.missing.append("kernel.pin_grub_default: grub.cfg was not read")


def _kernel_tools(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """`kernel.tools`: linux-tools of the running kernel is installed (cpupower, which DGX OS's
    governor unit runs)."""
    release = facts.kernel_release
    if release is None or ("dpkg" in facts.errors and not facts.packages):
        out.missing.append("kernel.tools: the installed packages were not read")
        return
    out.put(("kernel", "tools"), f"{TOOLS_PACKAGE_STEM}-{release}" in facts.packages, "")


def _other_kernels(facts: NodeFacts) -> list[str]:
    """Releases other than the running one with their linux-image installed and a (non
    recovery) GRUB menu entry: the kernels a node can fall back to."""
    menu = {entry.release for entry in facts.grub.entries if not entry.recovery} if facts.grub else set()
    return sorted(name.removeprefix("linux-image-") for name in facts.packages
                  if name.startswith("linux-image-")
                  and name.removeprefix("linux-image-") in menu - {facts.kernel_release})


def _fallback(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """`kernel.fallback`: the baseline's fallback release, installed with its GRUB entry, at
    the version the node has. A baseline that keeps none still keeps none (a node's old
    kernels are not a decision); the node's other bootable kernels are named."""
    fallback = baseline.kernel.fallback
    others = _other_kernels(facts)
    if fallback is None:
        if others:
            out.missing.append(f"kernel.fallback: the baseline keeps none; the node can also boot "
                               f"{', '.join(others)}")
        return
    if fallback.release not in others:
        out.missing.append(f"kernel.fallback: {fallback.release} is not installed with a GRUB entry"
                           + (f" (the node has {', '.join(others)})" if others else ""))
        return
    out.put(("kernel", "fallback", "release"), fallback.release, "")
    out.put(("kernel", "fallback", "package_version"), facts.packages[f"linux-image-{fallback.release}"], "")
