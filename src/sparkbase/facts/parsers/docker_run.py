"""What `docker run` gave a container, read back from `docker inspect`: the part sparkbase can
give again to run another image the same way.

A lane run as a container alone is restarted on another release's image by running that image
with the options the site's own container was run with. `docker inspect` shows them spread over
`HostConfig` and `Config`; `run_spec` reads the ones sparkbase gives again and refuses a
container that carries any other (a port publication, a `--mount`, a device, a capability, a
memory limit, ...), naming each, because running the other image without it would not be the
lane as the site runs it.

Given again: binds (`-v`), network, IPC namespace, CPU set, `--gpus all`, `--shm-size` when not
Docker's 64 MiB default, the `-e` values (`Config.Env` less what the image sets itself, so the
other image keeps its own defaults), labels the image does not set, and the command when it is not
the image's. Not given again, on purpose: the restart policy (a container sparkbase runs for a
comparison must not come back at boot), and settings that do not change how the engine runs
(log driver, console size, the cgroup namespace Docker picks, its default masked paths).
Samples: `tests/fixtures/real/docker_inspect_*`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Docker's default /dev/shm size (`ShmSize` of a container run without --shm-size)
DEFAULT_SHM_SIZE = 64 * 1024 * 1024
#: HostConfig keys given again (read by `run_spec`)
GIVEN_AGAIN = frozenset({"Binds", "NetworkMode", "IpcMode", "CpusetCpus", "DeviceRequests", "ShmSize"})
#: HostConfig keys whose value does not change how the engine runs, or that a new container
#: gets from Docker itself
NOT_GIVEN_AGAIN = frozenset({
    "RestartPolicy", "LogConfig", "ConsoleSize", "CgroupnsMode", "MaskedPaths", "ReadonlyPaths",
    "ContainerIDFile", "AutoRemove", "Isolation", "OomScoreAdj", "Dns", "DnsOptions", "DnsSearch",
})
#: Docker's own runtime; another (`--runtime nvidia`) is a setting this does not give again
DEFAULT_RUNTIMES = frozenset({"", "runc"})
_GPUS_ALL = {"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}


class NotReproducible(ValueError):
    """The container carries options sparkbase does not give again; `fields` names each."""

    def __init__(self, fields: list[str]) -> None:
        super().__init__("; ".join(fields))
        self.fields = fields


@dataclass(frozen=True)
class RunSpec:
    """The `docker run` options of one container that sparkbase gives again (see the module)."""

    binds: tuple[str, ...]
    network: str
    ipc: str
    cpuset: str
    gpus_all: bool
    shm_size: int | None
    env: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    command: tuple[str, ...] | None
    """`Config.Cmd` when the container was given one other than the image's (None: the image's)."""

    def argv(self, name: str, image: str, labels: dict[str, str]) -> list[str]:
        """`docker run -d --name NAME ... IMAGE [COMMAND...]` running `image` with these options,
        `--restart no`, and `labels` added to the container's own."""
        argv = ["docker", "run", "-d", "--name", name, "--restart", "no",
                "--network", self.network, "--ipc", self.ipc]
        if self.gpus_all:
            argv += ["--gpus", "all"]
        if self.cpuset:
            argv += ["--cpuset-cpus", self.cpuset]
        if self.shm_size is not None:
            argv += ["--shm-size", str(self.shm_size)]
        for bind in self.binds:
            argv += ["-v", bind]
        for item in self.env:
            argv += ["-e", item]
        for key, value in (*self.labels, *sorted(labels.items())):
            argv += ["--label", f"{key}={value}"]
        return [*argv, image, *(self.command or ())]


def _falsy(value: Any) -> bool:
    return value in (None, "", 0, False) or value == [] or value == {}


def _reproducible_binds(value: Any, problems: list[str]) -> tuple[str, ...]:
    binds = value or []
    if not isinstance(binds, list) or not all(isinstance(b, str) for b in binds):
        problems.append(f"HostConfig.Binds = {value!r} (expected a list of strings)")
        return ()
    for bind in binds:
        if not bind.startswith("/"):
            problems.append(f"HostConfig.Binds: {bind} (a named volume)")
    return tuple(binds)


def _gpus_all(value: Any, problems: list[str]) -> bool:
    if _falsy(value):
        return False
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        request = {**_GPUS_ALL, **value[0]}
        if request == _GPUS_ALL:
            return True
    problems.append(f"HostConfig.DeviceRequests = {value!r} (only --gpus all is given again)")
    return False


def _shm_size(value: Any, problems: list[str]) -> int | None:
    if value in (None, 0, DEFAULT_SHM_SIZE):
        return None
    if isinstance(value, int) and value > 0:
        return value
    problems.append(f"HostConfig.ShmSize = {value!r}")
    return None


def _others(host: dict[str, Any], problems: list[str]) -> None:
    for key in sorted(host):
        value = host[key]
        if key in GIVEN_AGAIN or key in NOT_GIVEN_AGAIN:
            continue
        if key == "Runtime" and value in DEFAULT_RUNTIMES:
            continue
        if not _falsy(value):
            problems.append(f"HostConfig.{key} = {value!r}")


def _not_the_images(container: list[str], image: list[str]) -> tuple[str, ...]:
    """The `-e` values: the container's entries the image does not have as they are."""
    own = set(image)
    return tuple(item for item in container if item not in own)


def _strings(value: Any, where: str, problems: list[str]) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    problems.append(f"{where} = {value!r} (expected a list of strings)")
    return []


def _labels(value: Any, where: str, problems: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return dict(value)
    problems.append(f"{where} = {value!r} (expected an object of strings)")
    return {}


def run_spec(container: dict[str, Any], image: dict[str, Any]) -> RunSpec:
    """One `docker inspect` container object and its image's `docker image inspect` object →
    the options to run another image the same way; `NotReproducible` naming every option it
    carries that is not given again (see the module)."""
    problems: list[str] = []
    host = container.get("HostConfig")
    config = container.get("Config")
    image_config = image.get("Config") or {}
    if not isinstance(host, dict) or not isinstance(config, dict) or not isinstance(image_config, dict):
        raise NotReproducible(["HostConfig and Config: not in the inspect output"])
    if not _falsy(config.get("Entrypoint")) and config.get("Entrypoint") != image_config.get("Entrypoint"):
        problems.append(f"Config.Entrypoint = {config.get('Entrypoint')!r} (not the image's)")
    for key in ("User", "WorkingDir"):
        if config.get(key, "") not in ("", image_config.get(key, "")):
            problems.append(f"Config.{key} = {config.get(key)!r} (not the image's)")
    network = host.get("NetworkMode") or "default"
    if not isinstance(network, str) or network.startswith("container:"):
        problems.append(f"HostConfig.NetworkMode = {network!r}")
    ipc = host.get("IpcMode") or "private"
    if not isinstance(ipc, str) or ipc.startswith("container:"):
        problems.append(f"HostConfig.IpcMode = {ipc!r}")
    binds = _reproducible_binds(host.get("Binds"), problems)
    gpus = _gpus_all(host.get("DeviceRequests"), problems)
    shm = _shm_size(host.get("ShmSize"), problems)
    cpuset = host.get("CpusetCpus") or ""
    _others(host, problems)
    env = _not_the_images(_strings(config.get("Env"), "Config.Env", problems),
                          _strings(image_config.get("Env"), "image Config.Env", problems))
    own_labels = _labels(image_config.get("Labels"), "image Config.Labels", problems)
    labels = {key: value for key, value in _labels(config.get("Labels"), "Config.Labels", problems).items()
              if own_labels.get(key) != value}
    cmd = _strings(config.get("Cmd"), "Config.Cmd", problems)
    image_cmd = _strings(image_config.get("Cmd"), "image Config.Cmd", problems)
    if problems:
        raise NotReproducible(problems)
    return RunSpec(binds=binds, network=str(network), ipc=str(ipc), cpuset=str(cpuset), gpus_all=gpus,
                   shm_size=shm, env=env, labels=tuple(sorted(labels.items())),
                   command=tuple(cmd) if cmd != image_cmd else None)
