"""`docker`: the Docker CLI as sparkbase and an operator use it, against the node's containers.

Supported (anything else fails as docker does for an unknown command or flag):

    docker run -d --name N [--network host] [--ipc host] [-v SRC:DST[:ro]]... [-e K=V]...
               [--label K=V]... [--cpuset-cpus LIST] [--gpus all] [--restart POLICY] IMAGE [ARGS...]
    docker inspect [--type container|image] [-f FORMAT] NAME|ID...
    docker container inspect|ls|ps|start|stop|restart|rm ...
    docker image inspect|ls|pull ...     docker images [-q] [--digests] [--no-trunc]
    docker ps [-a] [-q] [--no-trunc] [--format json|table|'{{json .}}'] [--filter name=N]
    docker start|stop [-t SECONDS]|restart|rm [-f] NAME...
    docker rename CONTAINER NEW_NAME
    docker pull IMAGE

What they print follows real Docker 25-27 (see docker_state.py); errors are Docker's own
text on stderr with its exit status (1 from the daemon, 125 from `docker run`). Images come
from the lab's catalogue (docker_images.py); there is no network. `--format` takes the
single-action templates `{{.A.B}}` and `{{json .A.B}}` (with text around them), not Go's
whole template language. `docker run` runs detached only.

`__container__` (inside a new container's mount namespace) and `__dockerd__` (at boot: the
containers whose restart policy brings them back) are internal entry points.
"""

from __future__ import annotations

import sys

from sparkbase_lab.shims import docker_runtime as runtime
from sparkbase_lab.shims import docker_state as state
from sparkbase_lab.shims.common import Fail, node_info
from sparkbase_lab.shims.docker_show import cmd_images, cmd_inspect, cmd_ps, parse_options

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

RESTART_POLICIES = ("no", "always", "unless-stopped", "on-failure")
#: `docker run` flags that take a value (long form), and their short forms
RUN_VALUE_FLAGS = {"--name": "name", "--network": "network", "--net": "network", "--ipc": "ipc",
                   "--volume": "volume", "-v": "volume", "--env": "env", "-e": "env",
                   "--cpuset-cpus": "cpuset", "--gpus": "gpus", "--restart": "restart",
                   "--label": "label", "-l": "label"}
RUN_BOOL_FLAGS = {"-d": "detach", "--detach": "detach"}


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def _no_such_container(word: str) -> str:
    return f"Error response from daemon: No such container: {word}"


# --- images ---------------------------------------------------------------------------------

def _pull(reference: str, out: Any) -> dict[str, Any]:
    """Pull `reference` from the lab's catalogue (no network); the pulled image. Prints what
    a non-terminal `docker pull` prints to `out`."""
    from sparkbase_lab.shims import docker_images as catalogue

    repository, tag, digest = catalogue.split_reference(reference)
    image = catalogue.find(reference)
    if image is None:
        if catalogue.known_repository(repository):
            raise Fail(f"Error response from daemon: manifest for {reference} not found: manifest unknown: "
                       "manifest unknown", 1)
        raise Fail(f"Error response from daemon: pull access denied for {repository}, repository does not "
                   "exist or may require 'docker login': denied: requested access to the resource is "
                   "denied", 1)
    with state.locked():
        pulled = state.images()
        mine = next((p for p in pulled if p["id"] == image["id"]), None)
        fresh = mine is None
        if mine is None:
            mine = {key: value for key, value in image.items() if key != "nccl_bytes"}
            mine["tags"] = []
            pulled.append(mine)
        if tag is not None and digest is None and tag not in mine["tags"]:
            mine["tags"].append(tag)
            fresh = True
        state.save_images(pulled)
    shown = f"{repository}@{digest}" if digest else f"{repository}:{tag}"
    full = shown if "/" in repository else f"library/{shown}"
    if fresh:
        print(f"{digest or tag}: Pulling from {repository if '/' in repository else 'library/' + repository}",
              file=out)
        for layer in image["layers"]:
            print(f"{layer[7:19]}: Pull complete", file=out)
        print(f"Digest: {image['digest']}", file=out)
        print(f"Status: Downloaded newer image for {shown}", file=out)
    else:
        print(f"Status: Image is up to date for {shown}", file=out)
    print(f"docker.io/{full}", file=out)
    return _with_bytes(mine)


def _with_bytes(pulled: dict[str, Any]) -> dict[str, Any]:
    """A pulled image with its catalogue-only fields (the image's own libnccl) back."""
    from sparkbase_lab.shims import docker_images as catalogue

    full = next((i for i in catalogue.CATALOGUE if i["id"] == pulled["id"]), {})
    return {**pulled, "nccl_bytes": full.get("nccl_bytes", b"")}


def cmd_pull(argv: list[str]) -> int:
    """`docker pull IMAGE`."""
    flags, args = parse_options(argv, {}, {"-q": "quiet", "--quiet": "quiet"}, "pull")
    if len(args) != 1:
        raise Fail("\"docker pull\" requires exactly 1 argument.\nSee 'docker pull --help'.", 1)
    if flags.get("quiet"):
        import io

        shown = io.StringIO()
        _pull(args[0], shown)
        print(shown.getvalue().splitlines()[-1])  # `-q`: only the pulled reference
    else:
        _pull(args[0], sys.stdout)
    return 0


def _image_of(record: dict[str, Any]) -> dict[str, Any] | None:
    found = state.find_image(record["image_id"])
    return _with_bytes(found) if found else None


# --- run, start, stop, rm -------------------------------------------------------------------

def _environment(values: list[str], image_env: list[str]) -> list[str]:
    """Config.Env: the image's, each `-e K=V` replacing its key or added at the end; `-e K`
    takes K from the caller's environment (dropped when unset), as docker does."""
    import os

    env = {item.partition("=")[0]: item for item in image_env}
    for value in values:
        key, eq, _ = value.partition("=")
        if not eq:
            if key not in os.environ:
                continue
            value = f"{key}={os.environ[key]}"
        env[key] = value
    return list(env.values())


def _labels(values: list[str]) -> dict[str, str]:
    """`--label K=V` values (a bare `K` is an empty label, as docker takes it)."""
    return {key: value for key, _, value in (item.partition("=") for item in values)}


def _check_run_values(flags: dict[str, list[str]]) -> None:
    for bind in flags.get("volume", []):
        source, destination, _mode = state.split_bind(bind) if bind.count(":") >= 1 else (bind, "", "")
        if not source.startswith("/") or not destination.startswith("/"):
            raise Fail(f"docker: Error response from daemon: invalid volume specification: '{bind}'.\n"
                       "See 'docker run --help'.", 125)
    policy = (flags.get("restart") or ["no"])[-1]
    if policy.split(":")[0] not in RESTART_POLICIES:
        raise Fail(f"docker: Error response from daemon: invalid restart policy '{policy}'.\n"
                   "See 'docker run --help'.", 125)


def cmd_run(argv: list[str]) -> int:
    """`docker run -d ...`: pull when missing, create, start; print the ID."""
    import secrets

    flags, rest = parse_options(argv, RUN_VALUE_FLAGS, RUN_BOOL_FLAGS, "run")
    if not rest:
        raise Fail("docker: 'docker run' requires at least 1 argument.\nSee 'docker run --help'.", 125)
    if not flags.get("detach"):
        raise Fail("docker: the sparkbase lab runs containers detached only: add -d.\n"
                   "See 'docker run --help'.", 125)
    _check_run_values(flags)
    reference, command = rest[0], rest[1:]
    name = (flags.get("name") or [""])[-1]
    network = (flags.get("network") or ["bridge"])[-1]
    found = state.find_image(reference)
    if found is None:
        print(f"Unable to find image '{reference}' locally", file=sys.stderr)
        try:
            image = _pull(reference, sys.stderr)
        except Fail as exc:
            raise Fail(f"docker: {exc}.\nSee 'docker run --help'.", 125) from exc
    else:
        image = _with_bytes(found)
    entrypoint = image["entrypoint"]
    cmd = command or image["cmd"]
    full = [*(entrypoint or []), *(cmd or [])]
    with state.locked():
        if name:
            holder = next((r for r in state.containers() if r["name"] == name), None)
            if holder is not None:
                raise Fail(f"docker: Error response from daemon: Conflict. The container name \"/{name}\" is "
                           f"already in use by container \"{holder['id']}\". You have to remove (or rename) "
                           "that container to be able to reuse that name.\nSee 'docker run --help'.", 125)
        cid = secrets.token_hex(32)
        record: dict[str, Any] = {
            "id": cid,
            "name": name or f"lab_{cid[:8]}",
            "created": state.now_rfc3339(),
            "image_ref": reference,
            "image_id": image["id"],
            "path": full[0],
            "args": full[1:],
            "cmd": command or image["cmd"],
            "entrypoint": entrypoint,
            "env": _environment(flags.get("env", []), image["env"]),
            "labels": {**image["labels"], **_labels(flags.get("label", []))},
            "binds": flags.get("volume", []),
            "network": network,
            "ipc": (flags.get("ipc") or ["private"])[-1],
            "cpuset": (flags.get("cpuset") or [""])[-1],
            "gpus": bool(flags.get("gpus")),
            "restart": (flags.get("restart") or ["no"])[-1].split(":")[0],
            # a host-network container has the node's name; any other its short ID
            "hostname": node_info().get("name", "") if network == "host" else cid[:12],
            "sandbox": secrets.token_hex(32),
            "endpoint": secrets.token_hex(32),
            "layer": secrets.token_hex(32),
            "stopped_by_user": False,
            "state": {"status": "created", "pid": 0, "start": 0, "workers": [], "exit_code": 0,
                      "started_at": state.ZERO_TIME, "finished_at": state.ZERO_TIME},
        }
        state.save(record)
        runtime.start(record, image)
        state.save(record)
    if record["state"]["status"] != "running":
        raise Fail(f"docker: Error response from daemon: failed to create task for container: the "
                   f"container's process exited at once (see {runtime.RUNTIME}/{cid}/output.log).", 127)
    print(cid)
    return 0


def _each_container(args: list[str], command: str, act: Callable[[dict[str, Any]], str | None]) -> int:
    """Run `act` on each named container, printing each name as given (docker echoes its
    arguments); a missing one is docker's error and exit status 1."""
    if not args:
        raise Fail(f"\"docker {command}\" requires at least 1 argument.\nSee 'docker {command} --help'.", 1)
    failed = []
    for word in args:
        with state.locked():
            record = state.find_container(word)
            problem = _no_such_container(word) if record is None else act(record)
            if record is not None and problem is None:
                state.save(record)
        if problem is None:
            print(word)
        else:
            _err(problem)
            failed.append(word)
    if failed and command == "start":
        _err(f"Error: failed to start containers: {', '.join(failed)}")
    return 1 if failed else 0


def cmd_start(argv: list[str]) -> int:
    """`docker start NAME...`."""
    _flags, args = parse_options(argv, {}, {"-a": "attach", "-i": "interactive"}, "start")

    def act(record: dict[str, Any]) -> str | None:
        runtime.settle(record)
        if record["state"]["status"] != "running":
            runtime.start(record, _image_of(record))
            record["stopped_by_user"] = False
        return None

    return _each_container(args, "start", act)


def cmd_stop(argv: list[str]) -> int:
    """`docker stop [-t SECONDS] NAME...`."""
    flags, args = parse_options(argv, {"-t": "time", "--time": "time", "--timeout": "time"}, {}, "stop")
    timeout = float((flags.get("time") or [str(runtime.STOP_TIMEOUT)])[-1])

    def act(record: dict[str, Any]) -> str | None:
        runtime.settle(record)
        if record["state"]["status"] == "running":
            runtime.stop(record, timeout)
        record["stopped_by_user"] = True
        return None

    return _each_container(args, "stop", act)


def cmd_restart(argv: list[str]) -> int:
    """`docker restart NAME...`."""
    flags, args = parse_options(argv, {"-t": "time", "--time": "time"}, {}, "restart")
    timeout = float((flags.get("time") or [str(runtime.STOP_TIMEOUT)])[-1])

    def act(record: dict[str, Any]) -> str | None:
        runtime.settle(record)
        if record["state"]["status"] == "running":
            runtime.stop(record, timeout)
        runtime.start(record, _image_of(record))
        record["stopped_by_user"] = False
        return None

    return _each_container(args, "restart", act)


def cmd_rm(argv: list[str]) -> int:
    """`docker rm [-f] NAME...`."""
    flags, args = parse_options(argv, {}, {"-f": "force", "--force": "force", "-v": "volumes"}, "rm")

    def act(record: dict[str, Any]) -> str | None:
        runtime.settle(record)
        if record["state"]["status"] == "running":
            if not flags.get("force"):
                return (f"Error response from daemon: cannot remove container \"/{record['name']}\": "
                        "container is running: stop the container before removing or force remove")
            runtime.stop(record, 0)
        state.remove(record)
        runtime.discard(record)
        return None

    if not args:
        raise Fail("\"docker rm\" requires at least 1 argument.\nSee 'docker rm --help'.", 1)
    failed = 0
    for word in args:
        with state.locked():
            record = state.find_container(word)
            problem = _no_such_container(word) if record is None else act(record)
        if problem is None:
            print(word)
        else:
            _err(problem)
            failed += 1
    return 1 if failed else 0


def cmd_rename(argv: list[str]) -> int:
    """`docker rename CONTAINER NEW_NAME`: prints nothing; docker's errors for a missing
    container or a name in use."""
    _flags, args = parse_options(argv, {}, {}, "rename")
    if len(args) != 2:
        raise Fail("\"docker rename\" requires exactly 2 arguments.\nSee 'docker rename --help'.\n\n"
                   "Usage:  docker rename CONTAINER NEW_NAME\n\nRename a container", 1)
    word, new = args
    with state.locked():
        record = state.find_container(word)
        if record is None:
            raise Fail(_no_such_container(word), 1)
        holder = next((r for r in state.containers() if r["name"] == new.lstrip("/")), None)
        if holder is not None:
            raise Fail(f"Error response from daemon: Conflict. The container name \"/{new}\" is already "
                       f"in use by container \"{holder['id']}\". You have to remove (or rename) that "
                       "container to be able to reuse that name.", 1)
        record["name"] = new.lstrip("/")
        state.save(record)
    return 0


# --- the command --------------------------------------------------------------------------------

def cmd_docker(argv: list[str]) -> int:
    """`docker COMMAND ...` (and the `docker container|image COMMAND` forms)."""
    if not argv:
        raise Fail("Usage:  docker [OPTIONS] COMMAND\n\nA self-sufficient runtime for containers", 0)
    command, rest = argv[0], argv[1:]
    if command in ("container", "image") and rest:
        sub, rest = rest[0], rest[1:]
        if sub == "inspect":
            return cmd_inspect(rest, command)
        table_ = (CONTAINER_COMMANDS if command == "container" else IMAGE_COMMANDS)
        if sub in table_:
            return table_[sub](rest)
        raise Fail(f"docker: '{command} {sub}' is not a docker command.\nSee 'docker --help'", 1)
    if command in COMMANDS_TABLE:
        return COMMANDS_TABLE[command](rest)
    raise Fail(f"docker: '{command}' is not a docker command.\nSee 'docker --help'", 1)


def dockerd_boot(_argv: list[str]) -> int:
    """At boot (node init): containers that ran when the node went down exited (255); those
    whose restart policy says so start again, as dockerd does when it starts."""
    import os

    if not os.path.isdir(state.CONTAINERS):
        return 0
    with state.locked():
        for record in state.containers():
            was_running = record["state"]["status"] == "running"
            if was_running:
                record["state"].update(status="exited", pid=0, start=0, workers=[], exit_code=255,
                                       finished_at=state.now_rfc3339())
            policy = record["restart"]
            if policy == "always" or (policy == "unless-stopped" and not record.get("stopped_by_user")):
                runtime.start(record, _image_of(record))
            state.save(record)
    return 0


CONTAINER_COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "ls": cmd_ps, "ps": cmd_ps, "list": cmd_ps, "run": cmd_run, "start": cmd_start, "stop": cmd_stop,
    "restart": cmd_restart, "rm": cmd_rm, "rename": cmd_rename,
}
IMAGE_COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "ls": cmd_images, "list": cmd_images, "pull": cmd_pull,
}
COMMANDS_TABLE: dict[str, Callable[[list[str]], int]] = {
    "run": cmd_run, "start": cmd_start, "stop": cmd_stop, "restart": cmd_restart, "rm": cmd_rm,
    "inspect": cmd_inspect, "ps": cmd_ps, "images": cmd_images, "pull": cmd_pull, "rename": cmd_rename,
}

COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "docker": cmd_docker, "__container__": runtime.launch, "__dockerd__": dockerd_boot,
}
