"""The `docker` stand-in's state, and the JSON documents real Docker prints from it.

State lives in the node (`/var/lib/sparkbase-lab/docker/`: survives reboots, as Docker's
own /var/lib/docker does): `images.json` (what was pulled) and one `containers/<id>.json`
per container (its `docker run` options, its state, the PID and start time of its main
process). Every change holds `docker.lock`.

`container_document` and `image_document` are what `docker inspect` prints for them, field
for field in the order and nesting real Docker 25-27 prints (API 1.44-1.47, Linux, cgroup
v2, overlay2): checked against the real samples in tests/fixtures/real/ (`docker_inspect_*`,
`docker_image_inspect_*`) by tests/unit/test_lab_docker.py. `go_json` writes JSON as Go's
encoder does (`<`, `>`, `&` escaped; other characters as they are).
"""

from __future__ import annotations

import os

from sparkbase_lab.shims.common import VAR, read_json, write_json
from sparkbase_lab.shims.docker_images import lab_hex

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager
    from typing import Any

DOCKER = f"{VAR}/docker"
IMAGES = f"{DOCKER}/images.json"
CONTAINERS = f"{DOCKER}/containers"
LOCK = f"{DOCKER}/docker.lock"
#: Go's zero time, as Docker prints a time that never happened
ZERO_TIME = "0001-01-01T00:00:00Z"
#: what a container's MaskedPaths / ReadonlyPaths are when it is not privileged (Docker 25-27)
MASKED_PATHS = ("/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                "/sys/firmware", "/sys/devices/virtual/powercap")
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
DEFAULT_SHM_SIZE = 67108864


def locked() -> AbstractContextManager[None]:
    """Hold the node's docker lock (one changing command at a time)."""
    import contextlib
    import fcntl

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        os.makedirs(DOCKER, exist_ok=True)
        with open(LOCK, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    return hold()


# --- records ------------------------------------------------------------------------------

def images() -> list[dict[str, Any]]:
    """Every pulled image: catalogue entry fields plus the tags it was pulled by."""
    data: list[dict[str, Any]] = read_json(IMAGES, [])
    return data


def save_images(data: list[dict[str, Any]]) -> None:
    """Write the pulled images."""
    write_json(IMAGES, data)


def containers() -> list[dict[str, Any]]:
    """Every container record, oldest first."""
    out = []
    for name in os.listdir(CONTAINERS) if os.path.isdir(CONTAINERS) else []:
        if name.endswith(".json"):
            record = read_json(f"{CONTAINERS}/{name}", None)
            if record:
                out.append(record)
    return sorted(out, key=lambda r: r["created"])


def save(record: dict[str, Any]) -> None:
    """Write one container record."""
    write_json(f"{CONTAINERS}/{record['id']}.json", record)


def remove(record: dict[str, Any]) -> None:
    """Forget one container."""
    os.unlink(f"{CONTAINERS}/{record['id']}.json")


def find_container(word: str) -> dict[str, Any] | None:
    """The container `word` names, as Docker resolves it: full ID, name (with or without the
    leading `/`), then a unique ID prefix."""
    records = containers()
    for record in records:
        if word in (record["id"], record["name"], "/" + record["name"]):
            return record
    prefixed = [r for r in records if word and r["id"].startswith(word)]
    return prefixed[0] if len(prefixed) == 1 else None


def find_image(word: str) -> dict[str, Any] | None:
    """The pulled image `word` names: its ID (`sha256:...` or a prefix of the hex), a
    reference it was pulled by, or `repo@digest` / `repo:tag` of it."""
    from sparkbase_lab.shims.docker_images import split_reference

    pulled = images()
    hexid = word.removeprefix("sha256:")
    for image in pulled:
        if word == image["id"] or (len(hexid) >= 4 and image["id"][7:].startswith(hexid)):
            return image
    repository, tag, digest = split_reference(word)
    for image in pulled:
        if image["repository"] != repository:
            continue
        if digest is not None and image["digest"] == digest:
            return image
        if digest is None and tag in image.get("tags", []):
            return image
    return None


# --- time ---------------------------------------------------------------------------------

def now_rfc3339() -> str:
    """Now in UTC as Go's RFC3339Nano prints it (fraction without trailing zeros)."""
    import time

    ns = time.time_ns()
    return rfc3339(ns)


def rfc3339(ns: int) -> str:
    """`ns` since the epoch in UTC, as Go's time.RFC3339Nano."""
    import time

    seconds, fraction = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    digits = f"{fraction:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of an RFC3339(Nano) UTC time (0 for Go's zero time)."""
    import calendar
    import time

    if text.startswith("0001-"):
        return 0.0
    whole, _, rest = text.rstrip("Z").partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds + (float("0." + rest) if rest else 0.0)


# --- JSON ---------------------------------------------------------------------------------

def go_json(value: Any, indent: int | None = 4) -> str:
    """JSON as Go's encoding/json writes it (docker's `inspect` indents by 4; `--format json`
    is compact): non-ASCII kept, `<`, `>`, `&` as \\u003c, \\u003e, \\u0026."""
    import json

    if indent is None:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    else:
        text = json.dumps(value, ensure_ascii=False, indent=indent)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# --- what `docker inspect` prints -----------------------------------------------------------

def bind_mounts(binds: list[str]) -> list[dict[str, Any]]:
    """`Mounts` entries of `-v SRC:DST[:MODE]` binds: Mode as given ("" when none), RW false
    only for `ro`, Propagation `rprivate` (Docker's default for binds)."""
    out = []
    for bind in binds:
        source, destination, mode = split_bind(bind)
        out.append({"Type": "bind", "Source": source, "Destination": destination, "Mode": mode,
                    "RW": "ro" not in mode.split(","), "Propagation": "rprivate"})
    return out


def split_bind(bind: str) -> tuple[str, str, str]:
    """`SRC:DST[:MODE]` as (source, destination, mode)."""
    parts = bind.split(":")
    return parts[0], parts[1], ":".join(parts[2:])


def _state(record: dict[str, Any]) -> dict[str, Any]:
    state = record["state"]
    status = state["status"]
    return {
        "Status": status,
        "Running": status == "running",
        "Paused": False,
        "Restarting": False,
        "OOMKilled": False,
        "Dead": False,
        "Pid": state["pid"] if status == "running" else 0,
        "ExitCode": state["exit_code"],
        "Error": "",
        "StartedAt": state["started_at"],
        "FinishedAt": state["finished_at"],
    }


def _host_config(record: dict[str, Any]) -> dict[str, Any]:
    requests = None
    if record.get("gpus"):
        requests = [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]
    return {
        "Binds": list(record["binds"]) or None,
        "ContainerIDFile": "",
        "LogConfig": {"Type": "json-file", "Config": {}},
        "NetworkMode": record["network"],
        "PortBindings": {},
        "RestartPolicy": {"Name": record["restart"], "MaximumRetryCount": 0},
        "AutoRemove": False,
        "VolumeDriver": "",
        "VolumesFrom": None,
        "ConsoleSize": [0, 0],
        "CapAdd": None,
        "CapDrop": None,
        "CgroupnsMode": "private",
        "Dns": [],
        "DnsOptions": [],
        "DnsSearch": [],
        "ExtraHosts": None,
        "GroupAdd": None,
        "IpcMode": record["ipc"],
        "Cgroup": "",
        "Links": None,
        "OomScoreAdj": 0,
        "PidMode": "",
        "Privileged": False,
        "PublishAllPorts": False,
        "ReadonlyRootfs": False,
        "SecurityOpt": None,
        "UTSMode": "",
        "UsernsMode": "",
        "ShmSize": DEFAULT_SHM_SIZE,
        "Runtime": "runc",
        "Isolation": "",
        "CpuShares": 0,
        "Memory": 0,
        "NanoCpus": 0,
        "CgroupParent": "",
        "BlkioWeight": 0,
        "BlkioWeightDevice": [],
        "BlkioDeviceReadBps": [],
        "BlkioDeviceWriteBps": [],
        "BlkioDeviceReadIOps": [],
        "BlkioDeviceWriteIOps": [],
        "CpuPeriod": 0,
        "CpuQuota": 0,
        "CpuRealtimePeriod": 0,
        "CpuRealtimeRuntime": 0,
        "CpusetCpus": record["cpuset"],
        "CpusetMems": "",
        "Devices": [],
        "DeviceCgroupRules": None,
        "DeviceRequests": requests,
        "MemoryReservation": 0,
        "MemorySwap": 0,
        "MemorySwappiness": None,
        "OomKillDisable": None,
        "PidsLimit": None,
        "Ulimits": [],
        "CpuCount": 0,
        "CpuPercent": 0,
        "IOMaximumIOps": 0,
        "IOMaximumBandwidth": 0,
        "MaskedPaths": list(MASKED_PATHS),
        "ReadonlyPaths": list(READONLY_PATHS),
    }


def _graph_driver(layer: str, image: dict[str, Any] | None) -> dict[str, Any]:
    base = "/var/lib/docker/overlay2"
    lowers = [f"{base}/{layer}-init/diff"]
    lowers += [f"{base}/{lab_hex('diff ' + digest)}/diff" for digest in (image or {}).get("layers", [])]
    return {
        "Data": {
            "LowerDir": ":".join(lowers),
            "MergedDir": f"{base}/{layer}/merged",
            "UpperDir": f"{base}/{layer}/diff",
            "WorkDir": f"{base}/{layer}/work",
        },
        "Name": "overlay2",
    }


def _config(record: dict[str, Any], image: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "Hostname": record["hostname"],
        "Domainname": "",
        "User": "",
        "AttachStdin": False,
        "AttachStdout": False,
        "AttachStderr": False,
        "Tty": False,
        "OpenStdin": False,
        "StdinOnce": False,
        "Env": list(record["env"]),
        "Cmd": list(record["cmd"]) if record["cmd"] is not None else None,
        "Image": record["image_ref"],
        "Volumes": None,
        "WorkingDir": (image or {}).get("working_dir", ""),
        "Entrypoint": list(record["entrypoint"]) if record["entrypoint"] is not None else None,
        "OnBuild": None,
        "Labels": dict(record.get("labels", (image or {}).get("labels", {}))),
    }


def _network_settings(record: dict[str, Any]) -> dict[str, Any]:
    node = record["hostname"]
    network = record["network"]
    host = network == "host"
    endpoint = {
        "IPAMConfig": None,
        "Links": None,
        "Aliases": None,
        "MacAddress": "",
        "DriverOpts": None,
        "NetworkID": lab_hex(f"{node} docker network {network}"),
        "EndpointID": record["endpoint"] if record["state"]["status"] == "running" else "",
        "Gateway": "",
        "IPAddress": "",
        "IPPrefixLen": 0,
        "IPv6Gateway": "",
        "GlobalIPv6Address": "",
        "GlobalIPv6PrefixLen": 0,
        "DNSNames": None,
    }
    running = record["state"]["status"] == "running"
    return {
        "Bridge": "",
        "SandboxID": record["sandbox"] if running else "",
        "SandboxKey": "" if not running else
        "/var/run/docker/netns/default" if host else f"/var/run/docker/netns/{record['sandbox'][:12]}",
        "Ports": {},
        "HairpinMode": False,
        "LinkLocalIPv6Address": "",
        "LinkLocalIPv6PrefixLen": 0,
        "SecondaryIPAddresses": None,
        "SecondaryIPv6Addresses": None,
        "EndpointID": "",
        "Gateway": "",
        "GlobalIPv6Address": "",
        "GlobalIPv6PrefixLen": 0,
        "IPAddress": "",
        "IPPrefixLen": 0,
        "IPv6Gateway": "",
        "MacAddress": "",
        "Networks": {"host" if host else "bridge": endpoint},
    }


def container_document(record: dict[str, Any], image: dict[str, Any] | None) -> dict[str, Any]:
    """What `docker inspect CONTAINER` prints for one container (one array element)."""
    cid = record["id"]
    where = f"/var/lib/docker/containers/{cid}"
    return {
        "Id": cid,
        "Created": record["created"],
        "Path": record["path"],
        "Args": list(record["args"]),
        "State": _state(record),
        "Image": record["image_id"],
        "ResolvConfPath": f"{where}/resolv.conf",
        "HostnamePath": f"{where}/hostname",
        "HostsPath": f"{where}/hosts",
        "LogPath": f"{where}/{cid}-json.log",
        "Name": "/" + record["name"],
        "RestartCount": 0,
        "Driver": "overlay2",
        "Platform": "linux",
        "MountLabel": "",
        "ProcessLabel": "",
        "AppArmorProfile": "docker-default",
        "ExecIDs": None,
        "HostConfig": _host_config(record),
        "GraphDriver": _graph_driver(record["layer"], image),
        "Mounts": bind_mounts(record["binds"]),
        "Config": _config(record, image),
        "NetworkSettings": _network_settings(record),
    }


def image_document(image: dict[str, Any]) -> dict[str, Any]:
    """What `docker image inspect IMAGE` prints for one pulled image (Docker 26-27: no
    `Container`/`ContainerConfig`, no `VirtualSize`)."""
    repository = image["repository"]
    tags = [f"{repository}:{tag}" for tag in image.get("tags", [])]
    layer = lab_hex("image layer " + image["id"])
    return {
        "Id": image["id"],
        "RepoTags": tags,
        "RepoDigests": [f"{repository}@{image['digest']}"],
        "Parent": "",
        "Comment": "buildkit.dockerfile.v0",
        "Created": image["created"],
        "DockerVersion": "",
        "Author": "",
        "Config": {
            "Hostname": "",
            "Domainname": "",
            "User": "",
            "AttachStdin": False,
            "AttachStdout": False,
            "AttachStderr": False,
            "Tty": False,
            "OpenStdin": False,
            "StdinOnce": False,
            "Env": list(image["env"]),
            "Cmd": list(image["cmd"]) if image["cmd"] is not None else None,
            "Image": "",
            "Volumes": None,
            "WorkingDir": image["working_dir"],
            "Entrypoint": list(image["entrypoint"]) if image["entrypoint"] is not None else None,
            "OnBuild": None,
            "Labels": dict(image["labels"]),
        },
        "Architecture": "arm64",
        "Variant": "v8",
        "Os": "linux",
        "Size": image["size"],
        "GraphDriver": {
            "Data": {
                "LowerDir": ":".join(f"/var/lib/docker/overlay2/{lab_hex('diff ' + d)}/diff"
                                     for d in image["layers"][:-1]),
                "MergedDir": f"/var/lib/docker/overlay2/{layer}/merged",
                "UpperDir": f"/var/lib/docker/overlay2/{layer}/diff",
                "WorkDir": f"/var/lib/docker/overlay2/{layer}/work",
            },
            "Name": "overlay2",
        },
        "RootFS": {"Type": "layers", "Layers": list(image["layers"])},
        "Metadata": {"LastTagTime": ZERO_TIME},
    }
