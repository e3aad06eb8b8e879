"""The lab as the site's fleet is found: four nodes set up by hand, serving from a container.

    lab = Lab(directory, port_base=2201)
    as_found.up(lab, load_site(Path(".")))   # or: sparkbase lab up --as-found

`setup` does to factory-fresh nodes what the site's operators did by hand, over SSH with the
nodes' own commands (apt, files, systemctl, update-grub, netplan, docker), and never runs
sparkbase, so the nodes hold no sparkbase ownership record, stamp or rendered file:

- the lane's baseline kernel, linux-tools and NVIDIA driver packages installed from the
  lab's apt repository, the kernel booted (a reboot);
- the site's patched NCCL library as a plain file at the baseline's path (no package), with
  the `libnccl.so.2` link a `make install` leaves;
- `/etc/default/grub` edited in place (the baseline's forbidden arguments out, its added ones
  in), `/etc/sysctl.d/99-local.conf` with the baseline's sysctls, the units the baseline
  disables disabled, its boot target the default;
- `/etc/netplan/40-fabric.yaml` (the inventory's fabric addresses, the baseline's MTU) and
  the installer's `/etc/netplan/50-cloud-init.yaml` with the node's management address;
- the production lane as the container `dsv41-flash` on each of its nodes: `docker run` of
  the production image by digest, `--network host --ipc host --gpus all`, the lane's CPUs,
  the NCCL library bind-mounted over the image's own, the baseline's NCCL settings as `-e`,
  SGLang's multi-node command line (API and `/metrics` on node rank 0, the head node);
- the model-name proxy's `.env` (`LABDIR/proxy.env`) naming the lane (by the site's
  `proxy.key`; none when the site names no proxy).

Values come from the site (inventory, the lane and its baseline) except what no site file
holds: the container, image and command line (the notes: `dsv41-flash`, the production
digest's first 8 hex digits, port 8000, SGLang TP4) and the management addresses (the notes
give the head node's, 10.69.43.170; the others are the lab's). `LABDIR/as-found.json`
records that the node disks are as found; the next `up --as-found` resumes them (the
containers come back by their restart policy).
"""

from __future__ import annotations

import base64
import json
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase_lab import lanes, packages
from sparkbase_lab.fleet import AS_FOUND_RECORD, Lab, LabError
from sparkbase_lab.shims import docker_images

if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkbase.model.baseline import Baseline
    from sparkbase.model.site import Site

#: the production lane and its container, as the notes name them
LANE = "dsv41-flash"
CONTAINER = "dsv41-flash"
IMAGE = docker_images.PRODUCTION_REFERENCE
#: where the production lane answers (the notes probe the head node at port 8000)
API_PORT = 8000
#: SGLang's rendezvous port on the head node (lab-made)
DIST_INIT_PORT = 5000
#: the operator's and the installer's netplan files
FABRIC_NETPLAN = "/etc/netplan/40-fabric.yaml"
MGMT_NETPLAN = "/etc/netplan/50-cloud-init.yaml"
#: the operator's sysctl file (not sparkbase's 90-sparkbase.conf)
SYSCTL_FILE = "/etc/sysctl.d/99-local.conf"
#: the management network: the head node's address is the notes' (10.69.43.170), the
#: others and the prefix are the lab's
MGMT_BASE = (10, 69, 43, 170)
MGMT_PREFIX = 24
#: the Hugging Face cache the container mounts (lab-made, as an operator runs SGLang)
HF_CACHE = "/root/.cache/huggingface"


@dataclass(frozen=True)
class AsFound:
    """What `setup` made: the lane, its container and image, and how long it took."""

    lane: str
    container: str
    image: str
    nodes: tuple[str, ...]
    seconds: float

    def to_json(self) -> dict[str, object]:
        """The `LABDIR/as-found.json` form."""
        return {"format": 1, "lane": self.lane, "container": self.container, "image": self.image,
                "nodes": list(self.nodes), "seconds": round(self.seconds, 2)}


def record_path(lab: Lab) -> Path:
    """`LABDIR/as-found.json`: present while the node disks are as found."""
    return lab.dir / AS_FOUND_RECORD


def is_as_found(lab: Lab) -> bool:
    """Whether the lab's node disks were set up as found."""
    return record_path(lab).is_file()


def up(lab: Lab, site: Site, fresh: bool = False, timeout: float = 60.0) -> bool:
    """Start the lab as found: resume as-found disks, or make them from factory-fresh nodes.
    False (nothing done) when it is already up as found; LabError when it is up otherwise."""
    nodes = len(site.lanes[LANE].nodes) if LANE in site.lanes else 4
    if lab.is_up():
        if is_as_found(lab) and not fresh:
            return False
        raise LabError(f"the lab in {lab.dir} is up and not as found; run `sparkbase lab down` first")
    if is_as_found(lab) and not fresh:
        lab.up(nodes, timeout=timeout)
        return True
    lab.up(nodes, fresh=True, timeout=timeout)
    try:
        setup(lab, site)
    except BaseException:
        lab.down()
        raise
    return True


def setup(lab: Lab, site: Site) -> AsFound:
    """Make the running, factory-fresh lab what the site's fleet is: see the module text."""
    started = time.monotonic()
    if LANE not in site.lanes:
        raise LabError(f"the site has no lane {LANE} (lanes/{LANE}.yaml)")
    lane = site.lanes[LANE]
    baseline = site.baselines[lane.baseline]
    library = baseline.nccl.library
    if library.sha256 != packages.NCCL_SITE_SHA256:
        raise LabError(f"baseline {lane.baseline}: nccl.library.sha256 {library.sha256} is not the lab's "
                       f"site library ({packages.NCCL_SITE_SHA256})")
    names = [name for name in lane.nodes if name in lab.node_names]
    if len(names) != len(lane.nodes):
        raise LabError(f"lane {LANE} runs on {', '.join(lane.nodes)}; "
                       f"the lab has {', '.join(lab.node_names)}")
    _each(names, lambda node: _by_hand(lab, site, node))
    _each(names, lambda node: lab.reboot(node, wait=True))
    _each(names, lambda node: _run_lane(lab, site, node))
    if site.rules.proxy is not None:  # a site without a proxy switches lanes some other way
        lanes.write_proxy_env(lab, site.rules.proxy.key, LANE)
    made = AsFound(LANE, CONTAINER, IMAGE, tuple(names), time.monotonic() - started)
    record_path(lab).write_text(json.dumps(made.to_json(), indent=1) + "\n")
    return made


def _each(nodes: list[str], act: Callable[[str], object]) -> None:
    """`act` on every node at once; the first failure raised."""
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        for future in [pool.submit(act, node) for node in nodes]:
            future.result()


def _sh(lab: Lab, node: str, script: str, what: str, stdin: str | None = None) -> str:
    status, out, err = lab.run(node, script, timeout=300, input=stdin)
    if status != 0:
        raise LabError(f"{node}: {what} failed (exit {status}): {err.strip()[-400:]}")
    return out


def management_address(site: Site, node: str) -> str:
    """The node's management address: the inventory's, else the notes' head address plus rank."""
    given = site.inventory.nodes[node].management_address
    if given:
        return given if "/" in given else f"{given}/{MGMT_PREFIX}"
    *head, last = MGMT_BASE
    return ".".join(str(part) for part in [*head, last + site.inventory.nodes[node].rank]) + f"/{MGMT_PREFIX}"


def fabric_netplan(site: Site, node: str, mtu: int) -> str:
    """The operator's netplan for the node's fabric ports: the inventory's addresses."""
    lines = ["# ConnectX-7 ring: one /24 per path (set up by hand)", "network:", "  version: 2",
             "  ethernets:"]
    for link in site.inventory.nodes[node].links:
        for path in link.paths:
            lines += [f"    {path.netdev}:", f"      mtu: {mtu}", f"      addresses: [{path.address}]"]
    return "\n".join(lines) + "\n"


def mgmt_netplan(address: str) -> str:
    """The installer's netplan for the management NIC, a static address given at install."""
    return ("# This file is generated from information provided by the datasource.  Changes\n"
            "# to it will not persist across an instance reboot.  To disable cloud-init's\n"
            "# network configuration capabilities, write a file\n"
            "# /etc/cloud/cloud.cfg.d/99-disable-network-config.cfg with the following:\n"
            "# network: {config: disabled}\n"
            "network:\n  version: 2\n  ethernets:\n    enP7s7:\n"
            f"      addresses:\n      - {address}\n")


def grub_edit(baseline: Baseline) -> str:
    """The shell that edits GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub as an operator
    would: the baseline's forbidden arguments out, its added ones in."""
    add = list(baseline.kernel.cmdline_add)
    if baseline.memory.transparent_hugepages != "madvise":
        add.append(f"transparent_hugepage={baseline.memory.transparent_hugepages}")
    program = (
        "import re,sys\n"
        "p='/etc/default/grub'; t=open(p).read(); forbid=sys.argv[1].split(); add=sys.argv[2].split()\n"
        "def fix(m):\n"
        "    words=[w for w in m.group(2).split() if w not in forbid and w.split('=')[0] not in forbid]\n"
        "    words+= [a for a in add if a not in words]\n"
        "    return m.group(1)+' '.join(words)+m.group(3)\n"
        "open(p,'w').write(re.sub(r'^(GRUB_CMDLINE_LINUX_DEFAULT=\")([^\"]*)(\")',fix,t,flags=re.M))\n"
    )
    return shlex.join(["python3", "-c", program, " ".join(baseline.kernel.cmdline_forbid), " ".join(add)])


def site_library(baseline: Baseline) -> str:
    """The host file of the site's NCCL library (a baseline whose NCCL is in the image has none)."""
    path = baseline.nccl.library.path
    if path is None:
        raise LabError("the site's fleet loads a host NCCL library: its baseline must pin one "
                       "(nccl.library provided_by: site or package, with path and sha256)")
    return path


def _by_hand(lab: Lab, site: Site, node: str) -> None:
    """Everything an operator did on the node before its reboot into the pinned kernel."""
    baseline = site.baselines[site.inventory.nodes[node].baseline]
    pins = [*baseline.kernel.packages(), *baseline.driver.packages(baseline.kernel)]
    library = Path(site_library(baseline))
    units = list(dict.fromkeys([*baseline.host.disable_services,
                                *([] if baseline.host.display_manager else ["gdm3.service"])]))
    sysctls = "".join(f"{key} = {value}\n" for key, value in baseline.memory.sysctls.items())
    files = {
        FABRIC_NETPLAN: fabric_netplan(site, node, baseline.fabric.mtu),
        MGMT_NETPLAN: mgmt_netplan(management_address(site, node)),
        SYSCTL_FILE: "# local tuning for the serving lanes\n" + sysctls,
    }
    steps = [
        "set -e",
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update -qq",
        f"apt-get install -y -qq {shlex.join(f'{p.name}={p.version}' for p in pins)} >/dev/null",
        f"install -d -m 755 {shlex.quote(str(library.parent))}",
        f"base64 -d > {shlex.quote(str(library))}",
        f"ln -sfn {shlex.quote(library.name)} {shlex.quote(str(library.parent / 'libnccl.so.2'))}",
        grub_edit(baseline),
        "update-grub >/dev/null 2>&1",
        *(f"printf %s {shlex.quote(text)} > {shlex.quote(path)}" for path, text in files.items()),
        f"chmod 600 {FABRIC_NETPLAN} {MGMT_NETPLAN}",
        "netplan apply",
        f"sysctl -q -p {SYSCTL_FILE} || true",
        f"systemctl set-default {shlex.quote(baseline.host.boot_target)} >/dev/null",
        *(f"systemctl disable --now {shlex.quote(unit)} >/dev/null 2>&1 || true" for unit in units),
    ]
    _sh(lab, node, "\n".join(steps), "setting the node up by hand",
        stdin=base64.b64encode(packages.NCCL_SITE_BYTES).decode())


def container_env(site: Site, node: str) -> list[str]:
    """The container's `-e` values: the baseline's NCCL settings (the node's GID index when the
    inventory gives one), and Gloo on the management NIC as NCCL's sockets are."""
    baseline = site.baselines[site.inventory.nodes[node].baseline]
    env = baseline.nccl.env_for(site.lanes[LANE].shape)
    override = site.inventory.nodes[node].gid_index
    if override is not None:
        env["NCCL_IB_GID_INDEX"] = str(override)
    env["GLOO_SOCKET_IFNAME"] = baseline.nccl.settings.socket_ifname
    return [f"{key}={value}" for key, value in env.items()]


def engine_command(site: Site, node: str) -> list[str]:
    """SGLang's multi-node command line for the node's rank (HTTP on rank 0 only)."""
    lane = site.lanes[LANE]
    head = sorted(lane.nodes, key=lambda n: site.inventory.nodes[n].rank)[0]
    head_address = management_address(site, head).split("/")[0]
    return ["python3", "-m", "sglang.launch_server", "--model-path", lane.model,
            "--tp", str(len(lane.nodes)), "--nnodes", str(len(lane.nodes)),
            "--node-rank", str(site.inventory.nodes[node].rank),
            "--dist-init-addr", f"{head_address}:{DIST_INIT_PORT}",
            "--host", "0.0.0.0", "--port", str(API_PORT),  # noqa: S104 (the command line the node runs)
            "--trust-remote-code", "--enable-metrics"]


def run_argv(site: Site, node: str, image: str = IMAGE, env: list[str] | None = None) -> list[str]:
    """The `docker run` an operator typed for the lane's container on `node`."""
    baseline = site.baselines[site.inventory.nodes[node].baseline]
    nccl_bind = f"{site_library(baseline)}:{docker_images.TORCH_NCCL_PATH}:ro"
    argv = ["docker", "run", "-d", "--name", CONTAINER, "--restart", "unless-stopped",
            "--network", "host", "--ipc", "host", "--gpus", "all",
            "--cpuset-cpus", baseline.cpuset.cpulist(),
            "-v", nccl_bind, "-v", f"{HF_CACHE}:{HF_CACHE}"]
    for item in container_env(site, node) if env is None else env:
        argv += ["-e", item]
    return [*argv, image, *engine_command(site, node)]


def _run_lane(lab: Lab, site: Site, node: str) -> None:
    """Pull the production image and start the lane's container, as the operator did."""
    _sh(lab, node, f"docker pull -q {shlex.quote(IMAGE)} >/dev/null && {shlex.join(run_argv(site, node))}",
        f"docker run {CONTAINER}")
