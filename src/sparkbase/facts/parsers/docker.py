"""Docker's view of a container and its image: `docker inspect` and `docker image inspect`.

Both print a JSON array, one object per name asked, indented by four spaces (samples in
`tests/fixtures/real/docker_inspect_*`). A name Docker does not know prints nothing in the
array and `Error: No such object: NAME` on stderr, with exit status 1 (the CLI flushes the
array first, then its errors), so `split_answer` reads stdout and stderr taken together.
A process's container is found from its cgroup (`container_id`): Docker's systemd cgroup
driver puts it in `docker-<64 hex>.scope`, the cgroupfs driver in `/docker/<64 hex>`.
Podman's `libpod-<id>.scope` is not Docker's: no id.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from sparkbase.facts.parsers.runtime import ProcCgroup, parse_cgroup

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SCOPE = re.compile(r"^docker-(?P<id>[0-9a-f]{64})\.scope$")
_IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ContainerMount:
    """One mount of a container (`.Mounts[]`): a bind mount's source is a host path."""

    type: str
    source: str
    destination: str
    read_only: bool


@dataclass(frozen=True)
class Container:
    """One container as `docker inspect` shows it (and its image's `RepoDigests`)."""

    id: str
    name: str
    image_ref: str
    image_id: str
    repo_digests: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    mounts: tuple[ContainerMount, ...]
    command: tuple[str, ...]
    running: bool
    network_mode: str

    def host_path(self, path: str) -> str | None:
        """The host file behind `path` inside the container: the source of the bind mount
        whose destination is `path` or the deepest directory holding it (None: no bind mount
        covers it; the file is the image's own)."""
        best: ContainerMount | None = None
        for mount in self.mounts:
            if mount.type != "bind":
                continue
            destination = mount.destination.rstrip("/") or "/"
            inside = path == destination or path.startswith(destination.rstrip("/") + "/")
            if inside and (best is None or len(destination) > len(best.destination.rstrip("/"))):
                best = mount
        if best is None:
            return None
        rest = path[len(best.destination.rstrip("/")):]
        return best.source.rstrip("/") + rest if rest else best.source


@dataclass(frozen=True)
class Image:
    """One image as `docker image inspect` shows it: its id and the digests it was pulled by."""

    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]


def container_id(cgroup_path: str) -> str | None:
    """The Docker container a cgroup path names (`…/docker-<id>.scope` or `…/docker/<id>`;
    the innermost when nested), None for any other path (a unit, podman, containerd)."""
    parts = [part for part in cgroup_path.split("/") if part]
    found: str | None = None
    for i, part in enumerate(parts):
        scope = _SCOPE.match(part)
        if scope is not None:
            found = scope["id"]
        elif i > 0 and parts[i - 1] == "docker" and _HEX64.match(part):
            found = part
    return found


def cgroup_container_id(cgroup: ProcCgroup) -> str | None:
    """The Docker container a process's cgroups name: the v2 path, then systemd's named v1
    hierarchy, then the other v1 hierarchies (a hybrid host puts the container in v1 and
    leaves the v2 path at containerd.service)."""
    paths = [cgroup.unified, cgroup.v1.get("name=systemd"), *(cgroup.v1[key] for key in sorted(cgroup.v1))]
    for path in paths:
        found = container_id(path) if path else None
        if found is not None:
            return found
    return None


def parse_cgroup_container_id(text: str) -> str | None:
    """`/proc/PID/cgroup` → the Docker container the process runs in (None: none)."""
    return cgroup_container_id(parse_cgroup(text))


def split_answer(text: str) -> tuple[str | None, tuple[str, ...]]:
    """The docker CLI's stdout and stderr taken together → the JSON array's text (None when
    there is none) and every other non-empty line (warnings before it, errors after it)."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if line.startswith("["):
            rest = "\n".join(lines[start:])
            try:
                _, end = json.JSONDecoder().raw_decode(rest)
            except json.JSONDecodeError:
                break
            after = rest[end:].splitlines()
            notes = [line.strip() for line in (*lines[:start], *after) if line.strip()]
            return rest[:end], tuple(notes)
    return None, tuple(line.strip() for line in lines if line.strip())


def _array(text: str, what: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not {what} JSON: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ValueError(f"not {what} JSON: expected an array of objects")
    return data


def _str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key}: expected a string, got {value!r}")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _object(obj: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = obj.get(key)
    if not isinstance(value, dict):
        raise ValueError(f"{where}.{key}: expected an object, got {value!r}")
    return value


def _mount(raw: Any, where: str) -> ContainerMount:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object")
    rw = raw.get("RW")
    if not isinstance(rw, bool):
        raise ValueError(f"{where}.RW: expected true or false, got {rw!r}")
    return ContainerMount(_str(raw, "Type", where), str(raw.get("Source") or ""),
                          _str(raw, "Destination", where), not rw)


def _container(raw: dict[str, Any], where: str) -> Container:
    cid = _str(raw, "Id", where)
    if not _HEX64.match(cid):
        raise ValueError(f"{where}.Id: not a container id (64 hex digits): {cid!r}")
    config = _object(raw, "Config", where)
    state = _object(raw, "State", where)
    host = raw.get("HostConfig")
    running = state.get("Running")
    if not isinstance(running, bool):
        raise ValueError(f"{where}.State.Running: expected true or false, got {running!r}")
    env = tuple(entry.partition("=")[::2] for entry in _strings(config.get("Env"), f"{where}.Config.Env"))
    mounts = raw.get("Mounts") or []
    if not isinstance(mounts, list):
        raise ValueError(f"{where}.Mounts: expected a list")
    path = raw.get("Path")
    return Container(
        id=cid,
        name=_str(raw, "Name", where).removeprefix("/"),
        image_ref=str(config.get("Image") or ""),
        image_id=_str(raw, "Image", where),
        repo_digests=(),
        env=env,
        mounts=tuple(_mount(m, f"{where}.Mounts[{i}]") for i, m in enumerate(mounts)),
        command=((path,) if isinstance(path, str) and path else ())
        + _strings(raw.get("Args"), f"{where}.Args"),
        running=running,
        network_mode=str(host.get("NetworkMode") or "") if isinstance(host, dict) else "",
    )


def parse_container_inspect(text: str) -> list[Container]:
    """`docker inspect CONTAINER...` (its JSON array) → each container, in the array's order
    (`repo_digests` empty: they are the image's, `with_images` fills them)."""
    return [_container(raw, f"[{i}]") for i, raw in enumerate(_array(text, "docker inspect"))]


def parse_image_inspect(text: str) -> list[Image]:
    """`docker image inspect IMAGE...` (its JSON array) → each image's id, tags and digests."""
    images: list[Image] = []
    for i, raw in enumerate(_array(text, "docker image inspect")):
        image_id = _str(raw, "Id", f"[{i}]")
        if not _IMAGE_ID.match(image_id):
            raise ValueError(f"[{i}].Id: not an image id (sha256:<64 hex>): {image_id!r}")
        images.append(Image(image_id, _strings(raw.get("RepoTags"), f"[{i}].RepoTags"),
                            _strings(raw.get("RepoDigests"), f"[{i}].RepoDigests")))
    return images


def with_images(containers: list[Container], images: list[Image]) -> list[Container]:
    """The containers with their image's `RepoDigests` (the image found by id)."""
    by_id = {image.id: image for image in images}
    return [replace(c, repo_digests=by_id[c.image_id].repo_digests) if c.image_id in by_id else c
            for c in containers]
