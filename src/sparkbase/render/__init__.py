"""Render a baseline into the exact files a node must carry.

`render_baseline` gives the files that depend only on the baseline; `node_files` adds the
node's own (the fabric netplan of its RDMA paths, its shape's NCCL settings and GID index in
nccl.conf) and the stamp that audits read.
Rendering is deterministic: the same input gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from sparkbase.model.cmdline import rendered_kernel_args
from sparkbase.model.fabric import node_gid_index, node_shape
from sparkbase.model.memory import BOOT_SWAP_SCRIPT, BOOT_SWAP_UNIT, BOOT_SWAP_UNIT_FILE
from sparkbase.model.netplan import SPARKBASE_NETPLAN_PATH
from sparkbase.model.sections import SECTIONS, Section

if TYPE_CHECKING:
    import jinja2

    from sparkbase.model.baseline import Baseline
    from sparkbase.model.site import Site

#: bump when templates change in a way that changes rendered output
RENDER_FORMAT = 1
STAMP_PATH = "/etc/sparkbase/stamp.json"
STAMP_FORMAT = 1

NETPLAN_PATH = SPARKBASE_NETPLAN_PATH

NCCL_CONF_PATH = "/etc/nccl.conf"
GRUB_DROPIN_PATH = "/etc/default/grub.d/60-sparkbase.cfg"
SYSCTL_PATH = "/etc/sysctl.d/90-sparkbase.conf"
MODPROBE_PATH = "/etc/modprobe.d/sparkbase.conf"
FSTAB_PATH = "/etc/fstab"
WATCHDOG_PATH = "/etc/systemd/system.conf.d/60-sparkbase-watchdog.conf"


@dataclass(frozen=True)
class RenderedFile:
    """One file a node must carry, byte for byte."""

    path: str
    content: str
    mode: int = 0o644
    needs_reboot: bool = False
    purpose: str = ""
    #: `content` is the part sparkbase writes into a site file at `path` (`fabric.netplan_file`),
    #: whose other keys are the site's: it is merged in, never written whole
    merged: bool = False
    #: the baseline section the file belongs to (None: the stamp, sparkbase's own record)
    section: Section | None = None

    @property
    def sha256(self) -> str:
        """sha256 of the content (what audits compare)."""
        return hashlib.sha256(self.content.encode()).hexdigest()


@dataclass(frozen=True)
class ManagedLine:
    """One line sparkbase owns inside a file it shares with others (e.g. /etc/fstab)."""

    path: str
    line: str
    match: str
    purpose: str = ""
    #: the baseline section the line belongs to
    section: Section = "memory"


@cache
def _environment() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("sparkbase.render", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - config files, not HTML; inputs are pattern-checked
    )


def _render(template: str, **context: object) -> str:
    return _environment().get_template(template).render(**context)


def sysctls(baseline: Baseline) -> dict[str, str]:
    """The sysctls the baseline sets, sorted by key."""
    return dict(sorted(baseline.memory.sysctls.items()))


def render_baseline(name: str, baseline: Baseline) -> list[RenderedFile]:
    """Files that depend only on the baseline, sorted by path."""
    context = {"baseline_name": name, "baseline": baseline}
    files = [
        render_nccl_conf(name, baseline),
        RenderedFile(
            GRUB_DROPIN_PATH,
            _render("grub.cfg.j2", cmdline=rendered_kernel_args(baseline), **context),
            needs_reboot=True,
            purpose="kernel command line and GRUB default entry",
            section="kernel",
        ),
        RenderedFile(
            SYSCTL_PATH,
            _render("sysctl.conf.j2", sysctls=sysctls(baseline), **context),
            purpose="kernel settings (applied live too)",
            section="memory",
        ),
        RenderedFile(
            MODPROBE_PATH,
            # no memory-saver line: the patched nvidia-uvm defaults packing on, and the stock
            # module (the 4 KiB fallback's) refuses the option (saver docs/dkms.md, 03dfde00)
            _render("modprobe.conf.j2", **context),
            needs_reboot=True,
            purpose="nvidia-drm module parameters",
            section="host",
        ),
        *([RenderedFile(
            f"/etc/systemd/system/{baseline.cpuset.slice}",
            _render("slice.j2", **context),
            purpose="serving cpuset slice",
            section="cpuset",
        )] if baseline.cpuset.pinned_by == "slice" else []),
        *render_modules_load(name, baseline),
        *render_boot_swap(name, baseline),
        *render_watchdog(name, baseline),
    ]
    return sorted(files, key=lambda f: f.path)


def render_boot_swap(name: str, baseline: Baseline) -> list[RenderedFile]:
    """The boot unit and its script that swap on the file made for the running kernel's
    page size (`memory.swap_by_page_size`; none otherwise)."""
    memory = baseline.memory
    if not memory.swap_by_page_size:
        return []
    context = {"baseline_name": name, "baseline": baseline, "unit": BOOT_SWAP_UNIT,
               "script": BOOT_SWAP_SCRIPT, "script_name": BOOT_SWAP_SCRIPT.rsplit("/", 1)[-1]}
    files = [(size, shlex.quote(path)) for size, path in memory.swap_files().items()]
    return [
        RenderedFile(BOOT_SWAP_SCRIPT, _render("boot-swap.sh.j2", files=files, **context), mode=0o755,
                     purpose="swap on the file made for the running page size, run at boot",
                     section="memory"),
        RenderedFile(BOOT_SWAP_UNIT_FILE, _render("boot-swap.service.j2", **context),
                     purpose="the boot unit that runs it, before swap.target", section="memory"),
    ]


def render_watchdog(name: str, baseline: Baseline) -> list[RenderedFile]:
    """The system.conf.d drop-in arming systemd's watchdog (none when the baseline sets none)."""
    watchdog = baseline.host.watchdog
    if watchdog is None:
        return []
    content = _render("watchdog.conf.j2", baseline_name=name, baseline=baseline, watchdog=watchdog)
    return [RenderedFile(WATCHDOG_PATH, content, needs_reboot=True,
                         purpose="systemd runtime and reboot watchdog", section="host")]


def render_modules_load(name: str, baseline: Baseline) -> list[RenderedFile]:
    """The modules-load.d entry of the fan-control module (none without fan control)."""
    fan = baseline.host.fan_control
    if fan is None:
        return []
    content = _render("modules-load.conf.j2", baseline_name=name, baseline=baseline, module=fan.module,
                      purpose=f"fan control ({fan.dkms_name})")
    return [RenderedFile(fan.modules_load_path, content, needs_reboot=True,
                         purpose="fan-control module loaded at boot", section="host")]


def render_nccl_conf(name: str, baseline: Baseline, gid_index: int | None = None,
                     shape: str | None = None) -> RenderedFile:
    """/etc/nccl.conf of a node of `shape` (the shared settings with that shape's own,
    `nccl.shapes`; None: the shared ones only); `gid_index` is a node's own RoCE v2 GID
    index (the inventory's `gid_index`), replacing the baseline's NCCL_IB_GID_INDEX on that
    node only."""
    env = baseline.nccl.env_for(shape)
    node_override = gid_index is not None and str(gid_index) != env.get("NCCL_IB_GID_INDEX")
    if node_override:
        env["NCCL_IB_GID_INDEX"] = str(gid_index)
    shaped = shape if shape in baseline.nccl.shaped() else None
    content = _render(
        "nccl.conf.j2", baseline_name=name, baseline=baseline, nccl_env=env, node_gid_index=node_override,
        shape=shaped,
    )
    return RenderedFile(NCCL_CONF_PATH, content, purpose="NCCL settings every lane reads", section="nccl")


def fabric_netplan_path(baseline: Baseline) -> str:
    """The netplan file the fabric is configured in: the site's own (`fabric.netplan_file`),
    else sparkbase's."""
    return baseline.fabric.netplan_file or NETPLAN_PATH


def fabric_ethernets(baseline: Baseline, paths: dict[str, NetplanPath]) -> dict[str, dict[str, object]]:
    """Netdev -> the netplan settings the fabric netplan gives it (the keys sparkbase sets in
    `network.ethernets.NETDEV`), in port order; the same values `netplan.yaml.j2` writes."""
    return {
        port.netdev: {
            "dhcp4": False,
            "dhcp6": False,
            "link-local": [],
            "mtu": baseline.fabric.mtu,
            "addresses": [paths[port.netdev].address] if port.netdev in paths else [],
        }
        for port in baseline.fabric.ports
    }


def render_netplan(name: str, baseline: Baseline, paths: dict[str, NetplanPath]) -> RenderedFile:
    """The fabric netplan with this node's RDMA paths, one address each (mode 0600, as
    netplan wants). With `fabric.netplan_file`, the fabric part sparkbase merges into the
    site's file there (`merged`)."""
    site_file = baseline.fabric.netplan_file
    content = _render("netplan.yaml.j2", baseline_name=name, baseline=baseline, paths=paths,
                      merged_into=site_file)
    if site_file is not None:
        return RenderedFile(site_file, content, mode=0o600, merged=True, section="fabric",
                            purpose="four-PF fabric netplan, in the site's file")
    return RenderedFile(NETPLAN_PATH, content, mode=0o600, purpose="four-PF fabric netplan", section="fabric")


def swap_fstab_line(path: str) -> str:
    """The /etc/fstab line sparkbase writes for its swap file."""
    return f"{path} none swap sw 0 0"


def managed_lines(baseline: Baseline) -> list[ManagedLine]:
    """Lines sparkbase owns in shared files: the swap entry in /etc/fstab (none when the
    boot unit chooses the swap file by page size: a line would fail on the other kernel)."""
    swap = baseline.memory.swap
    if swap is None or baseline.memory.swap_by_page_size:
        return []
    return [
        ManagedLine(
            FSTAB_PATH,
            swap_fstab_line(swap.path),
            match=rf"^{re.escape(swap.path)}\s",
            purpose="swap file",
        )
    ]


@dataclass(frozen=True)
class NetplanPath:
    """One RDMA path as the netplan writes it: this end's address and where the path goes."""

    address: str  # a.b.c.d/prefix
    subnet: str
    peer: str
    peer_netdev: str


def node_paths(site: Site, node: str) -> dict[str, NetplanPath]:
    """Netdev -> the RDMA path it carries on `node`, from the inventory's cabling."""
    return {
        path.netdev: NetplanPath(path.address, path.subnet, link.peer, path.peer_netdev)
        for link in site.inventory.nodes[node].links
        for path in link.paths
    }


def baseline_digest(name: str, baseline: Baseline) -> str:
    """sha256 of everything a baseline renders and pins, independent of any node.

    The lock file records it: a change here without a version bump is a silent change to
    a qualified baseline. Every file the baseline renders counts, managed or not (`managed:`
    is in the model, so changing it changes the digest). Fields added since baselines were
    first locked count only when they differ from their default (`DIGEST_QUIET_DEFAULTS`),
    so a baseline that does not use them keeps the digest its lock records.
    """
    digest = hashlib.sha256(f"render-format={RENDER_FORMAT}\n".encode())
    data = baseline.model_dump(mode="json")
    for path, default in DIGEST_QUIET_DEFAULTS:
        _drop_default(data, path, default)
    model = json.dumps(data, sort_keys=True, separators=(",", ":"))
    digest.update(model.encode())
    for file in render_baseline(name, baseline):
        digest.update(f"\0{file.path}\0{file.mode:o}\0".encode())
        digest.update(file.content.encode())
    for line in managed_lines(baseline):
        digest.update(f"\0{line.path}\0{line.line}".encode())
    return digest.hexdigest()


#: fields added after baselines were first locked, and the default that means what a
#: baseline without them always meant: left out of the digest while at that default
DIGEST_QUIET_DEFAULTS: tuple[tuple[tuple[str, ...], object], ...] = (
    (("managed",), list(SECTIONS)),
    (("nccl", "library", "provided_by"), "package"),
    (("nccl", "shapes"), {}),
    (("fabric", "netplan_file"), None),
    (("cpuset", "pinned_by"), "slice"),
    (("memory", "swap_by_page_size"), False),
    (("host", "uefi_first"), None),
    (("host", "drm_driver"), None),
    (("host", "console_text"), False),
    (("host", "watchdog"), None),
    (("retired_packages",), []),
)


def _drop_default(data: dict[str, object], path: tuple[str, ...], default: object) -> None:
    """Remove `path` from the dumped model when it holds `default`."""
    holder: object = data
    for key in path[:-1]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    if isinstance(holder, dict) and holder.get(path[-1], object()) == default:
        del holder[path[-1]]


def stamp_content(name: str, baseline: Baseline, files: list[RenderedFile]) -> str:
    """The stamp JSON: which baseline and version a node was converged to, and hashes."""
    files_digest = hashlib.sha256()
    for file in files:
        files_digest.update(f"{file.path}\0{file.sha256}\n".encode())
    stamp = {
        "format": STAMP_FORMAT,
        "baseline": name,
        "version": baseline.version,
        "baseline_sha256": baseline_digest(name, baseline),
        "files_sha256": files_digest.hexdigest(),
    }
    return json.dumps(stamp, indent=2, sort_keys=True) + "\n"


def node_files(site: Site, node: str, baseline_name: str | None = None) -> list[RenderedFile]:
    """Every file `node` must carry under its inventory baseline, or `baseline_name`
    instead (a lane's, or `--baseline`), the stamp last.

    The node's own parts: the netplan of its paths, its shape's NCCL settings
    (`model.fabric.node_shape`) and, when the inventory gives the node its own `gid_index`,
    NCCL_IB_GID_INDEX in /etc/nccl.conf. Only the files of the
    sections the baseline manages: a section left as found has no file sparkbase writes,
    and a baseline that manages nothing has no stamp either (sparkbase writes nothing).
    """
    entry = site.inventory.nodes[node]
    name = baseline_name or entry.baseline
    baseline = site.baselines[name]
    files = [
        file for file in render_baseline(name, baseline) if file.path != NCCL_CONF_PATH
    ]
    shape = node_shape(site.inventory, node, baseline)
    files.append(render_nccl_conf(name, baseline, node_gid_index(entry, baseline), shape))
    files.append(render_netplan(name, baseline, node_paths(site, node)))
    files = sorted((f for f in files if f.section is None or baseline.manages(f.section)),
                   key=lambda f: f.path)
    if not baseline.managed:
        return files
    stamp = RenderedFile(STAMP_PATH, stamp_content(name, baseline, files), purpose="sparkbase stamp")
    return [*files, stamp]


def node_lines(baseline: Baseline) -> list[ManagedLine]:
    """The lines sparkbase owns in shared files on a node of `baseline`: those of the
    sections it manages."""
    return [line for line in managed_lines(baseline) if baseline.manages(line.section)]
