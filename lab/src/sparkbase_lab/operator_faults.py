"""Faults a person makes on a node, done the way they would do them (over SSH, with the
node's own `docker` and `netplan`), and undone the same way.

- `container-env [CONTAINER]` (default dsv41-flash): the container is removed and run again
  as it was, with `NCCL_IB_MERGE_NICS=1` in its environment;
- `container-image [CONTAINER]`: the container is removed and run again as it was, from
  another digest of the same repository (the queued upgrade);
- `stale-address [NETDEV]` (default enp1s0f0np0): an older netplan file,
  `/etc/netplan/30-fabric-old.yaml`, gives the port its former address; `netplan apply`
  leaves it with both (netplan appends address lists across files).

`inject` records what it changed (the container's environment or image as it was) in the
node's `faults.json` under the kind, and `clear` puts that back. The container is run again
from what `docker inspect` shows of it (name, restart policy, network, IPC, GPUs, CPUs,
binds, `Config.Env`, image, command): what an operator does to change one option.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from sparkbase_lab import boot
from sparkbase_lab.fleet import Lab, LabError
from sparkbase_lab.shims import docker_images

KINDS = ("container-env", "container-image", "stale-address")
DEFAULT_CONTAINER = "dsv41-flash"
DEFAULT_NETDEV = "enp1s0f0np0"
#: what the fault `container-env` sets (NCCL's own default; the site runs 0)
MERGE_NICS = "NCCL_IB_MERGE_NICS=1"
#: the image the fault `container-image` runs: the same repository, another digest
OTHER_IMAGE = docker_images.NEXT_REFERENCE
STALE_NETPLAN = "/etc/netplan/30-fabric-old.yaml"


def check_arg(kind: str, arg: str | None) -> str:
    """The fault's argument (its default when none is given); LabError when it is wrong."""
    if kind == "stale-address":
        arg = arg or DEFAULT_NETDEV
        if arg not in boot.FABRIC.values():
            known = ", ".join(boot.FABRIC.values())
            raise LabError(f"stale-address: unknown fabric netdev {arg!r} (one of {known})")
        return arg
    return arg or DEFAULT_CONTAINER


def stale_address(node_index: int, netdev: str) -> str:
    """The port's former address (lab-made: an older addressing plan, 192.168.1xx.N/24)."""
    port = list(boot.FABRIC.values()).index(netdev)
    return f"192.168.{100 + port}.{node_index}/24"


def _sh(lab: Lab, node: str, script: str, what: str) -> str:
    status, out, err = lab.run(node, script, timeout=120)
    if status != 0:
        raise LabError(f"{node}: {what} failed (exit {status}): {err.strip()[-400:]}")
    return out


def inspect(lab: Lab, node: str, container: str) -> dict[str, Any]:
    """`docker inspect CONTAINER` on the node, as a document."""
    documents: list[dict[str, Any]] = json.loads(_sh(lab, node, f"docker inspect {shlex.quote(container)}",
                                                     f"docker inspect {container}"))
    return documents[0]


def run_argv(document: dict[str, Any], env: list[str] | None = None, image: str | None = None) -> list[str]:
    """The `docker run` that makes the container `document` describes again (with `env` as
    its environment and `image` as its image when given)."""
    host = document["HostConfig"]
    config = document["Config"]
    argv = ["docker", "run", "-d", "--name", document["Name"].lstrip("/"),
            "--restart", host["RestartPolicy"]["Name"], "--network", host["NetworkMode"],
            "--ipc", host["IpcMode"]]
    if host.get("DeviceRequests"):
        argv += ["--gpus", "all"]
    if host.get("CpusetCpus"):
        argv += ["--cpuset-cpus", host["CpusetCpus"]]
    for bind in host.get("Binds") or []:
        argv += ["-v", bind]
    for item in config["Env"] if env is None else env:
        argv += ["-e", item]
    return [*argv, image or config["Image"], document["Path"], *document["Args"]]


def _rerun(lab: Lab, node: str, document: dict[str, Any], env: list[str] | None = None,
           image: str | None = None) -> None:
    name = document["Name"].lstrip("/")
    again = shlex.join(run_argv(document, env, image))
    _sh(lab, node, f"docker rm -f {shlex.quote(name)} >/dev/null && {again}", f"running {name} again")


def inject(lab: Lab, node: str, kind: str, arg: str, node_index: int) -> dict[str, Any]:
    """Do fault `kind` on `node`; what to record to undo it."""
    if kind == "stale-address":
        text = (f"# the fabric before the ring was re-addressed\nnetwork:\n  version: 2\n  ethernets:\n"
                f"    {arg}:\n      addresses: [{stale_address(node_index, arg)}]\n")
        write = f"printf %s {shlex.quote(text)} > {STALE_NETPLAN} && chmod 600 {STALE_NETPLAN}"
        _sh(lab, node, f"{write} && netplan apply", "writing an old netplan file")
        return {"netdev": arg, "file": STALE_NETPLAN}
    document = inspect(lab, node, arg)
    env, image = list(document["Config"]["Env"]), document["Config"]["Image"]
    if kind == "container-env":
        changed = [item for item in env if not item.startswith("NCCL_IB_MERGE_NICS=")] + [MERGE_NICS]
        _rerun(lab, node, document, env=changed)
    else:
        _rerun(lab, node, document, image=OTHER_IMAGE)
    return {"container": arg, "env": env, "image": image}


def clear(lab: Lab, node: str, kind: str, recorded: dict[str, Any]) -> None:
    """Undo fault `kind` on `node` from what `inject` recorded."""
    if kind == "stale-address":
        _sh(lab, node, f"rm -f {STALE_NETPLAN} && netplan apply", "removing the old netplan file")
        return
    document = inspect(lab, node, recorded["container"])
    _rerun(lab, node, document, env=recorded["env"], image=recorded["image"])
