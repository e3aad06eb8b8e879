"""Rules across fields and files, each pointing at the field a person should change.

Every rule is a function over typed models that yields `Finding`s; `site.py` turns them
into located `Problem`s. `contract_breaches` is also used by `compare`, `apply` and the
gate, so the site contract is judged in exactly one place.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbase.errors import Severity
from sparkbase.model.baseline import Baseline
from sparkbase.model.coverage import key_problem, placeholders, uncovered
from sparkbase.model.fabric import fabric_findings, lane_cabling_findings
from sparkbase.model.findings import DocRef, Finding
from sparkbase.model.kernel import KERNEL_PACKAGE_STEMS, TOOLS_PACKAGE_STEM
from sparkbase.model.memory import FACTORY_SWAP_HEADER
from sparkbase.model.rendered_rules import rendered_findings
from sparkbase.model.shapes import ONESHOT_SHAPES, SHAPE_NODES
from sparkbase.model.types import GB10_FAST_CPUS
from sparkbase.model.yamlio import PathKey

if TYPE_CHECKING:
    from sparkbase.model.inventory import Inventory
    from sparkbase.model.lanes import Lane
    from sparkbase.model.site_rules import SiteContract

@dataclass(frozen=True)
class Breach:
    """One way a baseline breaks the site contract."""

    path: PathKey
    what: str
    expected: str
    actual: str

    def message(self) -> str:
        """`kernel 7.0.0-… is not on the 6.17 line` style text."""
        return f"{self.what}: the site contract says {self.expected}, this baseline has {self.actual}"


def baseline_findings(name: str, baseline: Baseline) -> Iterator[Finding]:
    """Rules inside one baseline."""
    doc: DocRef = ("baseline", name)
    kernel = baseline.kernel
    is_64k_flavour = kernel.release.endswith("-64k")
    if (kernel.page_size == 65536) != is_64k_flavour:
        yield Finding(
            doc,
            ("kernel", "page_size"),
            f"page size {kernel.page_size} does not match kernel {kernel.release}: 64 KiB pages "
            "come only with a '-64k' kernel flavour, and a '-64k' kernel always runs them",
        )
    swap = baseline.memory.swap
    if swap is not None and swap.header_page_size != kernel.page_size:
        yield Finding(
            doc,
            ("memory", "swap", "header_page_size"),
            f"swap header page size {swap.header_page_size} differs from the kernel's page size "
            f"{kernel.page_size}: the kernel would refuse to swap on it",
        )
    saver = baseline.memory.memory_saver
    # the MOK fingerprint may stay unpinned (a site still to confirm its key, the lab's own
    # key): then any enrolled certificate that signed the module counts
    if saver is not None and saver.required and not baseline.secure_boot.enabled:
        yield Finding(
            doc,
            ("memory", "memory_saver", "required"),
            "a required memory-saver module needs Secure Boot on with an enrolled MOK key "
            "(set secure_boot.enabled: true; pin the key with secure_boot.mok_fingerprint)",
        )
    if baseline.memory.display_carveout and not baseline.host.nvidia_drm.modeset:
        yield Finding(
            doc,
            ("memory", "display_carveout"),
            "the display carve-out needs nvidia-drm modeset (set host.nvidia_drm.modeset: true)",
        )
    yield from _modeset_purge_findings(doc, baseline)
    yield from _governor_findings(doc, baseline)
    for index, cpu in enumerate(baseline.cpuset.cpus):
        if cpu not in GB10_FAST_CPUS:
            yield Finding(
                doc,
                ("cpuset", "cpus", index),
                f"CPU {cpu} is not a GB10 fast core (Cortex-X925 are 5-9 and 15-19)",
            )
    yield from _nccl_shape_findings(doc, baseline)
    if baseline.nccl.settings.ib_gid_index != baseline.fabric.gid_index:
        yield Finding(
            doc,
            ("nccl", "settings", "ib_gid_index"),
            f"NCCL_IB_GID_INDEX {baseline.nccl.settings.ib_gid_index} differs from the fabric's "
            f"RoCE v2 GID index {baseline.fabric.gid_index}",
        )
    netdevs = [port.netdev for port in baseline.fabric.ports]
    if len(set(netdevs)) != len(netdevs):
        yield Finding(doc, ("fabric", "ports"), "a netdev is listed twice")
    added = {arg.split("=")[0]: arg for arg in kernel.cmdline_add}
    for index, arg in enumerate(kernel.cmdline_forbid):
        if arg in kernel.cmdline_add or ("=" not in arg and arg in added):
            yield Finding(
                doc,
                ("kernel", "cmdline_forbid", index),
                f"'{arg}' is both required (cmdline_add) and forbidden",
            )
    yield from rendered_findings(doc, baseline)
    for index, shape in enumerate(baseline.shapes):
        home = ONESHOT_SHAPES.get(shape.transport)
        if home is not None and home != shape.name:
            yield Finding(
                doc,
                ("shapes", index, "transport"),
                f"transport {shape.transport} needs {_spelled(SHAPE_NODES[home])} nodes "
                f"(shape {home}); shape {shape.name} has {SHAPE_NODES[shape.name]}",
            )
    yield from _version_form_findings(doc, baseline)
    yield from _fallback_and_factory_swap_findings(doc, baseline)
    yield from _boot_swap_findings(doc, baseline)
    yield from _provenance_findings(doc, baseline)
    yield from _retired_package_findings(doc, baseline)


def _nccl_shape_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """NCCL_IB_HCA names only the fabric's RDMA devices, shared and per shape; a shape's
    own settings belong to a shape the baseline is qualified for."""
    hcas = set(baseline.fabric.hca_names())
    lists: list[tuple[PathKey, list[str]]] = [(("nccl", "settings", "ib_hca"), baseline.nccl.settings.ib_hca)]
    for shape, own in baseline.nccl.shaped().items():
        if baseline.shape(shape) is None:
            yield Finding(
                doc,
                ("nccl", "shapes", shape),
                f"settings for shape {shape}, which the baseline is not qualified for "
                f"(shapes: {', '.join(s.name for s in baseline.shapes)}); remove them, or set "
                f"`{shape}: null` in a baseline that extends one with them",
            )
        if own.ib_hca is not None:
            lists.append((("nccl", "shapes", shape, "ib_hca"), own.ib_hca))
    for key, entries in lists:
        for index, entry in enumerate(entries):
            device = entry.lstrip("=^").split(":")[0]
            if device not in hcas:
                yield Finding(
                    doc,
                    (*key, index),
                    f"'{device}' is not one of the fabric's RDMA devices ({', '.join(sorted(hcas))})",
                )


def _governor_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """A managed CPU governor is set by DGX OS's nv-cpu-governor.service, which runs the
    kernel's own cpupower: the kernel's linux-tools package must be pinned with it."""
    if baseline.host.cpu_governor is not None and not baseline.kernel.tools:
        yield Finding(
            doc,
            ("host", "cpu_governor"),
            f"governor {baseline.host.cpu_governor} is set by nv-cpu-governor.service, which runs "
            f"cpupower from linux-tools-{baseline.kernel.release} and fails without it: set "
            "kernel.tools: true (or cpu_governor: null)",
        )


def _modeset_purge_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """`host.nvidia_drm.purge` removes the package that forces modeset off: it goes with
    modeset on, and never with a pin of the same package."""
    drm = baseline.host.nvidia_drm
    if drm.purge is None:
        return
    if not drm.modeset:
        yield Finding(
            doc,
            ("host", "nvidia_drm", "purge"),
            f"purging {drm.purge} turns nvidia-drm modeset on, but host.nvidia_drm.modeset is false",
        )
    if drm.purge in {pin.name for pin in baseline.packages()}:
        yield Finding(
            doc,
            ("host", "nvidia_drm", "purge"),
            f"{drm.purge} is both purged (host.nvidia_drm.purge) and pinned: remove the pin",
        )


#: a package Ubuntu builds for one kernel release (`linux-image-6.17.0-1032-nvidia`,
#: `linux-modules-nvidia-580-open-6.17.0-1032-nvidia`)
_PER_KERNEL = re.compile(
    rf"^({'|'.join([*KERNEL_PACKAGE_STEMS, TOOLS_PACKAGE_STEM])})-(.+-)?\d+\.\d+\.\d+-\d+")


def _retired_package_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """A retired package is not pinned again, and belongs to no kernel (by section or name):
    it is purged at any time, and a kernel's packages may go only once another kernel runs."""
    pinned = {pin.name for pin in baseline.packages()}
    for index, retired in enumerate(baseline.retired_packages):
        if retired.name in pinned:
            yield Finding(doc, ("retired_packages", index, "name"),
                          f"{retired.name} is both retired and pinned: remove one of them")
        kernel_field = "section" if retired.section == "kernel" else \
            "name" if _PER_KERNEL.match(retired.name) else None
        if kernel_field is not None:
            yield Finding(doc, ("retired_packages", index, kernel_field),
                          "a kernel's packages are retired with the kernel itself (only while another "
                          "kernel runs): list only packages of no kernel here")


def _spelled(count: int) -> str:
    return {3: "three", 4: "four"}.get(count, str(count))


#: Ubuntu kernel package version of release U-ABI-FLAVOUR: U-ABI.UPLOAD, and on a backport
#: the series suffix ~24.04.N (7.0.0-1019.19~24.04.2; 6.17.0-1032.32 has none)
_KERNEL_PACKAGE_VERSION = r"{upstream}-{abi}\.[0-9]+(~[0-9]{{2}}\.[0-9]{{2}}\.[0-9]+)?"
#: Debian version of the NVIDIA user-space packages: DRIVER-0ubuntu0.24.04.N and the like
_DRIVER_PACKAGE_VERSION = r"{driver}-[0-9]+ubuntu[0-9][0-9.]*"


def _version_form_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """Package versions in forms no Ubuntu archive can have (apt would fail on the node)."""
    kernel = baseline.kernel
    upstream, abi = kernel.release.split("-")[:2]
    form = _KERNEL_PACKAGE_VERSION.format(upstream=re.escape(upstream), abi=abi)
    if re.fullmatch(form, kernel.package_version) is None:
        yield Finding(
            doc,
            ("kernel", "package_version"),
            f"{kernel.package_version} cannot be the package version of kernel {kernel.release}: "
            f"Ubuntu versions its packages {upstream}-{abi}.UPLOAD, with a series suffix on "
            "backports (e.g. 7.0.0-1019.19~24.04.2; read it with `dpkg-query -W linux-image-$(uname -r)`)",
        )
    driver = baseline.driver
    form = _DRIVER_PACKAGE_VERSION.format(driver=re.escape(driver.version))
    if re.fullmatch(form, driver.package_version) is None:
        yield Finding(
            doc,
            ("driver", "package_version"),
            f"{driver.package_version} cannot be the package version of driver {driver.version}: "
            f"DGX OS ships it as {driver.version}-0ubuntu0.24.04.N "
            "(read it with `dpkg-query -W nvidia-utils-580`)",
        )


def _fallback_and_factory_swap_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """The fallback kernel is another kernel, versioned as Ubuntu versions it; the installer's
    swap file is never sparkbase's own swap file, and only a 4 KiB kernel can swap on it."""
    kernel = baseline.kernel
    fallback = kernel.fallback
    if fallback is not None and fallback.release == kernel.release:
        yield Finding(doc, ("kernel", "fallback", "release"),
                      f"the fallback kernel is the baseline's own kernel {kernel.release}: name another "
                      "release, or drop kernel.fallback")
    if fallback is not None:
        upstream, abi = fallback.release.split("-")[:2]
        form = _KERNEL_PACKAGE_VERSION.format(upstream=re.escape(upstream), abi=abi)
        if re.fullmatch(form, fallback.package_version) is None:
            yield Finding(doc, ("kernel", "fallback", "package_version"),
                          f"{fallback.package_version} cannot be the package version of kernel "
                          f"{fallback.release}: Ubuntu versions its packages {upstream}-{abi}.UPLOAD, "
                          "with a series suffix on backports (e.g. 7.0.0-1019.19~24.04.2)")
    memory = baseline.memory
    factory = memory.factory_swap
    if factory is None:
        return
    if memory.swap is not None and memory.swap.path == factory.path:
        yield Finding(doc, ("memory", "swap", "path"),
                      f"{factory.path} is the installer's swap file (memory.factory_swap): sparkbase "
                      "never makes, resizes or deletes it; give its own swap file another path")
    if factory.swapoff and factory.fstab != "noauto":
        yield Finding(doc, ("memory", "factory_swap", "swapoff"),
                      f"swapoff applies only with fstab: noauto (as-installed keeps {factory.path} "
                      "the node's swap)")
    if factory.fstab == "as-installed" and kernel.page_size != FACTORY_SWAP_HEADER:
        yield Finding(doc, ("memory", "factory_swap", "fstab"),
                      f"{factory.path} has the installer's {FACTORY_SWAP_HEADER}-byte swap header: a "
                      f"{kernel.page_size}-byte-page kernel cannot swap on it (set fstab: noauto)")


def _release_page_size(release: str) -> int:
    """The page size a kernel release runs: 64 KiB for a '-64k' flavour, else 4 KiB."""
    return 65536 if release.endswith("-64k") else 4096


def _boot_swap_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """Swap chosen at boot by page size needs a swap file for every kernel the baseline
    keeps in GRUB (its own and the fallback), or that kernel boots with no swap."""
    memory = baseline.memory
    if not memory.swap_by_page_size:
        return
    if memory.swap is None:
        yield Finding(doc, ("memory", "swap_by_page_size"),
                      "swap_by_page_size needs a swap file (memory.swap) to choose")
        return
    files = memory.swap_files()
    kernel = baseline.kernel
    kept: list[tuple[str, int]] = [(kernel.release, kernel.page_size)]
    if kernel.fallback is not None:
        kept.append((kernel.fallback.release, _release_page_size(kernel.fallback.release)))
    for release, page_size in kept:
        if page_size not in files:
            yield Finding(doc, ("memory", "swap_by_page_size"),
                          f"kernel {release} runs {page_size}-byte pages and no swap file has that "
                          "header: it would boot with no swap (keep the installer's 4 KiB /swap.img "
                          "with memory.factory_swap fstab: noauto)")


def _provenance_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """Sources entries that name no field (errors) and every placeholder (a warning each).

    No message names the baseline: an entry in a shared base file is then reported once,
    however many baselines extend it.
    """
    for key in baseline.sources:
        problem = key_problem(key, baseline)
        if problem is not None:
            yield Finding(doc, ("sources", key), f"names no baseline field: {problem}")
    for key, source in placeholders(baseline):
        yield Finding(doc, ("sources", key), f"placeholder: {source.note}", Severity.WARNING)
    missing: dict[str, list[str]] = {}
    for path in uncovered(baseline):
        missing.setdefault(str(path[0]), []).append(".".join(str(part) for part in path))
    for block, fields in missing.items():
        shown_fields = ", ".join(fields[:4]) + (f" and {len(fields) - 4} more" if len(fields) > 4 else "")
        yield Finding(
            doc,
            (block,),
            f"no source recorded for {shown_fields}: add a sources entry "
            f"(e.g. `{block}: {{kind: placeholder, note: ...}}`)",
            Severity.WARNING,
        )


def contract_breaches(contract: SiteContract, baseline: Baseline) -> list[Breach]:
    """Every way `baseline` breaks the site contract (empty when it satisfies it).

    NCCL is judged on what /etc/nccl.conf will hold (`as_env()`: typed keys, which `extra`
    cannot shadow, and the extras), so the verdict is about what is rendered.
    """
    breaches: list[Breach] = []
    release = baseline.kernel.release
    if not release.startswith(contract.kernel_line + "."):
        breaches.append(
            Breach(("kernel", "release"), "kernel line", contract.kernel_line, release)
        )
    if baseline.kernel.page_size != contract.page_size:
        breaches.append(
            Breach(
                ("kernel", "page_size"),
                "page size",
                str(contract.page_size),
                str(baseline.kernel.page_size),
            )
        )
    breaches.extend(_merge_nics_breaches(contract, baseline))
    saver = baseline.memory.memory_saver
    if saver is not None and saver.required and not contract.memory_saver_allowed:
        breaches.append(
            Breach(
                ("memory", "memory_saver", "required"),
                "memory-saver DKMS module",
                "not allowed",
                "required",
            )
        )
    if baseline.memory.display_carveout and not contract.display_carveout_allowed:
        breaches.append(
            Breach(("memory", "display_carveout"), "display carve-out", "not allowed", "used")
        )
    for index, shape in enumerate(baseline.shapes):
        if shape.transport not in contract.transports:
            breaches.append(
                Breach(
                    ("shapes", index, "transport"),
                    f"transport of shape {shape.name}",
                    " or ".join(contract.transports),
                    shape.transport,
                )
            )
    return breaches


def _merge_nics_breaches(contract: SiteContract, baseline: Baseline) -> list[Breach]:
    """NCCL_IB_MERGE_NICS as each qualified shape's nccl.conf holds it: the shared value
    (when a shape keeps it), then each shape's own."""
    want = str(contract.nccl_ib_merge_nics)
    shaped = baseline.nccl.shaped()
    found: list[Breach] = []
    shared = baseline.nccl.settings.as_env()["NCCL_IB_MERGE_NICS"]
    keeps_shared = any(shaped.get(s.name) is None or shaped[s.name].ib_merge_nics is None
                       for s in baseline.shapes)
    if shared != want and keeps_shared:
        found.append(Breach(("nccl", "settings", "ib_merge_nics"), "NCCL_IB_MERGE_NICS", want, shared))
    for shape, own in shaped.items():
        if own.ib_merge_nics is not None and str(own.ib_merge_nics) != want:
            found.append(Breach(("nccl", "shapes", shape, "ib_merge_nics"),
                                f"NCCL_IB_MERGE_NICS on shape {shape}", want, str(own.ib_merge_nics)))
    return found


def contract_notice(name: str, baseline: Baseline, breaches: list[Breach]) -> str:
    """One plain sentence: this baseline cannot be assigned while the contract stands."""
    reasons = "; ".join(breach.message() for breach in breaches)
    return (
        f"baseline '{name}' breaks the site contract and cannot be assigned to a node while "
        f"the contract stands: {reasons}"
    )


def inventory_findings(
    inventory: Inventory,
    baselines: dict[str, Baseline],
    abstract: set[str],
    contract: SiteContract,
    broken: frozenset[str] = frozenset(),
) -> Iterator[Finding]:
    """Rules across the inventory, the baselines it names and the site contract.

    A node naming a `broken` baseline (its file exists but has errors, reported there) is
    not reported again as naming a missing one.
    """
    doc: DocRef = ("inventory", "")
    nodes = inventory.nodes
    ranks: dict[int, str] = {}
    for name, node in nodes.items():
        base = ("nodes", name)
        if node.rank in ranks:
            yield Finding(doc, (*base, "rank"), f"rank {node.rank} is also {ranks[node.rank]}'s")
        ranks[node.rank] = name
        if node.baseline in abstract:
            yield Finding(
                doc,
                (*base, "baseline"),
                f"'{node.baseline}' is abstract (a base for other baselines); assign a concrete one",
            )
            continue
        baseline = baselines.get(node.baseline)
        if baseline is None and node.baseline in broken:
            continue
        if baseline is None:
            yield Finding(
                doc,
                (*base, "baseline"),
                f"no baseline '{node.baseline}' in baselines/ (have: {', '.join(sorted(baselines))})",
            )
            continue
        breaches = contract_breaches(contract, baseline)
        if breaches:
            yield Finding(
                doc,
                (*base, "baseline"),
                contract_notice(node.baseline, baseline, breaches)
                + " (an override is recorded by `sparkbase apply --override-policy`)",
            )
    yield from _shared_findings(inventory, baselines, contract)
    yield from fabric_findings(inventory, baselines)


def _shared_findings(
    inventory: Inventory, baselines: dict[str, Baseline], contract: SiteContract
) -> Iterator[Finding]:
    doc: DocRef = ("inventory", "")
    assigned = [
        (name, baselines[node.baseline])
        for name, node in inventory.nodes.items()
        if node.baseline in baselines
    ]
    if not assigned:
        return
    first_name, first = assigned[0]
    for name, baseline in assigned[1:]:
        library, shared = baseline.nccl.library, first.nccl.library
        if contract.shared_nccl_library and (library.path, library.sha256) != (shared.path, shared.sha256):
            yield Finding(
                doc,
                ("nodes", name, "baseline"),
                f"{name} would load a different NCCL library than {first_name}; the site "
                "contract wants one library (path and sha256) on every node",
            )
        same_shape = (baseline.fabric.ports, baseline.fabric.mtu) == (
            first.fabric.ports,
            first.fabric.mtu,
        )
        if contract.shared_netplan_shape and not same_shape:
            yield Finding(
                doc,
                ("nodes", name, "baseline"),
                f"{name}'s fabric netplan differs in shape from {first_name}'s; the site "
                "contract wants one netplan shape on every node",
            )


def lane_findings(
    name: str,
    lane: Lane,
    baselines: dict[str, Baseline],
    inventory: Inventory,
    broken: frozenset[str] = frozenset(),
) -> Iterator[Finding]:
    """Rules for one lane: its baseline, version, shape and nodes (none when its baseline
    is `broken`: that file's own errors are reported).

    A disabled lane (one the site rejected) is still checked for references that do not
    exist, but not for being launchable: preflight refuses it anyway.
    """
    doc: DocRef = ("lane", name)
    baseline = baselines.get(lane.baseline)
    if baseline is None:
        if lane.baseline not in broken:
            yield Finding(doc, ("baseline",), f"no baseline '{lane.baseline}' in baselines/")
        return
    if lane.baseline_version != baseline.version:
        severity = Severity.ERROR if lane.enabled else Severity.WARNING
        yield Finding(
            doc,
            ("baseline_version",),
            f"lane was qualified on {lane.baseline} {lane.baseline_version}, but the baseline is "
            f"now {baseline.version}: requalify the lane, then update baseline_version",
            severity,
        )
    shape = baseline.shape(lane.shape)
    if shape is None:
        yield Finding(
            doc,
            ("shape",),
            f"baseline {lane.baseline} is not qualified for shape {lane.shape} "
            f"(qualified: {', '.join(s.name for s in baseline.shapes)})",
        )
    if len(lane.nodes) != SHAPE_NODES[lane.shape]:
        yield Finding(
            doc,
            ("nodes",),
            f"shape {lane.shape} needs {SHAPE_NODES[lane.shape]} nodes, the lane names "
            f"{len(lane.nodes)}",
        )
    if len(set(lane.nodes)) != len(lane.nodes):
        yield Finding(doc, ("nodes",), "a node is named twice")
    for index, node_name in enumerate(lane.nodes):
        node = inventory.nodes.get(node_name)
        if node is None:
            yield Finding(doc, ("nodes", index), f"no node '{node_name}' in the inventory")
        elif lane.enabled and node.baseline != lane.baseline:
            yield Finding(
                doc,
                ("nodes", index),
                f"{node_name} carries baseline {node.baseline}, but the lane needs "
                f"{lane.baseline}: a lane's nodes all carry its baseline",
            )
    yield from lane_cabling_findings(name, lane, inventory)
