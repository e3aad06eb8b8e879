"""What the `docker` stand-in shows: `inspect`, `ps`, `images`, and `--format` templates.

`docker inspect` prints `docker_state.container_document` / `image_document` as Go's
encoder indents them (4 spaces); `docker ps --format json` one compact object per line, keys
sorted, every value a string, as the Docker CLI's formatter prints them (the real samples
tests/fixtures/real/docker_ps_*, docker_container_ls_*); the tables as docker's tabwriter
lays them out. `--format` takes `{{.A.B}}` and `{{json .A.B}}` actions, not Go's whole
template language.
"""

from __future__ import annotations

import sys

from sparkbase_lab.shims import docker_runtime as runtime
from sparkbase_lab.shims import docker_state as state
from sparkbase_lab.shims.common import Fail

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any


def parse_options(argv: list[str], value_flags: dict[str, str], bool_flags: dict[str, str],
             command: str) -> tuple[dict[str, list[str]], list[str]]:
    """A docker command's flags up to the first argument that is not one (docker stops there: what follows is
    the container's), as name -> values; the rest."""
    found: dict[str, list[str]] = {}
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return found, argv[index + 1 :]
        if not word.startswith("-") or word == "-":
            break
        flag, eq, value = word.partition("=")
        if flag in value_flags:
            if not eq:
                index += 1
                if index >= len(argv):
                    raise Fail(f"flag needs an argument: {flag}\nSee 'docker {command} --help'.", 125)
                value = argv[index]
            found.setdefault(value_flags[flag], []).append(value)
        elif flag in bool_flags and not eq:
            found.setdefault(bool_flags[flag], []).append("true")
        elif len(word) > 2 and word[1] != "-" and all(f"-{c}" in bool_flags for c in word[1:]):
            for c in word[1:]:
                found.setdefault(bool_flags[f"-{c}"], []).append("true")
        else:
            status = 125 if command == "run" else 1
            if word.startswith("--"):
                raise Fail(f"unknown flag: {flag}\nSee 'docker {command} --help'.", status)
            raise Fail(f"unknown shorthand flag: '{word[1]}' in {word}\n"
                       f"See 'docker {command} --help'.", status)
        index += 1
    return found, argv[index:]


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def _image_of(record: dict[str, Any]) -> dict[str, Any] | None:
    return state.find_image(record["image_id"])


def _lookup(document: Any, path: str) -> Any:
    value = document
    for part in [p for p in path.split(".") if p]:
        if not isinstance(value, dict) or part not in value:
            raise KeyError(part)
        value = value[part]
    return value


def _go_text(value: Any) -> str:
    """A value as Go's text/template prints it (`{{.X}}`)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + " ".join(_go_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_text(value[k])}" for k in sorted(value)) + "]"
    return str(value)


def render_format(template: str, document: dict[str, Any]) -> str:
    """`--format TEMPLATE` for one object: `{{.A.B}}` and `{{json .A.B}}` actions."""
    import re

    def action(match: re.Match[str]) -> str:
        is_json, path = bool(match.group(1)), match.group(2)
        try:
            value = _lookup(document, path)
        except KeyError as exc:
            raise Fail(f"template parsing error: template: :1:{match.start() + 2}: executing \"\" at "
                       f"<.{path}>: map has no entry for key \"{exc.args[0]}\"", 1) from exc
        return state.go_json(value, indent=None) if is_json else _go_text(value)

    if re.search(r"{{(?!\s*(json\s+)?\.[\w.]*\s*}})", template):
        raise Fail(f"template: {template}: the sparkbase lab's docker takes only {{{{.Field}}}} and "
                   "{{json .Field}} actions", 1)
    return re.sub(r"{{\s*(json\s+)?\.([\w.]*)\s*}}", action, template)


def _inspect(words: list[str], kind: str | None, template: str | None) -> int:
    documents: list[dict[str, Any]] = []
    missing = []
    for word in words:
        record = state.find_container(word) if kind in (None, "container") else None
        if record is not None:
            if runtime.settle(record):
                with state.locked():
                    state.save(record)
            documents.append(state.container_document(record, _image_of(record)))
            continue
        image = state.find_image(word) if kind in (None, "image") else None
        if image is not None:
            documents.append(state.image_document(image))
            continue
        missing.append(word)
    if template is not None:
        for document in documents:
            print(render_format(template, document))
    else:
        print(state.go_json(documents))
    for word in missing:
        what = {"container": "container", "image": "image"}.get(kind or "", "object")
        _err(f"Error: No such {what}: {word}")
    return 1 if missing else 0


def cmd_inspect(argv: list[str], kind: str | None = None) -> int:
    """`docker inspect [--type container|image] [-f FORMAT] NAME|ID...`."""
    flags, args = parse_options(argv, {"--type": "type", "-f": "format", "--format": "format"},
                           {"-s": "size", "--size": "size"}, "inspect")
    kind = (flags.get("type") or [kind or ""])[-1] or None
    if kind not in (None, "container", "image"):
        raise Fail(f"\"{kind}\" is not a valid value for --type", 1)
    if not args:
        raise Fail("\"docker inspect\" requires at least 1 argument.\nSee 'docker inspect --help'.", 1)
    given = (flags.get("format") or ["json"])[-1]
    return _inspect(args, kind, None if given == "json" else given)


def _human_duration(seconds: float) -> str:
    """docker/go-units HumanDuration."""
    whole = int(seconds)
    if whole < 1:
        return "Less than a second"
    if whole == 1:
        return "1 second"
    if whole < 60:
        return f"{whole} seconds"
    minutes = int(seconds / 60)
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = round(seconds / 3600)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // 24 // 30} months"
    return f"{int(seconds / 3600) // 24 // 365} years"


def _ellipsis(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def ps_image(reference: str, no_trunc: bool = False) -> str:
    """The IMAGE column: docker/cli's ContainerContext.Image drops the digest unless
    `--no-trunc` (`repo:tag` when a tag was given, else the repository)."""
    if no_trunc or "@" not in reference:
        return reference
    return reference.split("@")[0]


def ps_row(record: dict[str, Any], now: float, no_trunc: bool = False) -> dict[str, str]:
    """One container as `docker ps --format json` prints it (every value a string)."""
    import time

    created = state.parse_rfc3339(record["created"])
    status = record["state"]["status"]
    if status == "running":
        shown = "Up " + _human_duration(now - state.parse_rfc3339(record["state"]["started_at"]))
    elif status == "exited":
        ago = _human_duration(now - state.parse_rfc3339(record["state"]["finished_at"]))
        shown = f"Exited ({record['state']['exit_code']}) {ago} ago"
    else:
        shown = "Created"
    command = " ".join([record["path"], *record["args"]])
    mounts = [state.split_bind(b)[0] for b in record["binds"]]
    image = state.find_image(record["image_id"])
    labels = (image or {}).get("labels", {})
    return {
        "Command": '"' + (command if no_trunc else _ellipsis(command, 20)) + '"',
        "CreatedAt": time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(created)),
        "ID": record["id"] if no_trunc else record["id"][:12],
        "Image": ps_image(record["image_ref"], no_trunc),
        "Labels": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        "LocalVolumes": "0",
        "Mounts": ",".join(m if no_trunc else _ellipsis(m, 15) for m in mounts),
        "Names": record["name"],
        "Networks": "host" if record["network"] == "host" else record["network"],
        "Ports": "",
        "RunningFor": _human_duration(now - created) + " ago",
        "Size": "0B",
        "State": status,
        "Status": shown,
    }


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Rows as docker's tabwriter lays them out (min width 10, padding 3)."""
    widths = [max(10, max(len(r[i]) for r in [headers, *rows]) + 3) for i in range(len(headers) - 1)]
    lines = []
    for row in [headers, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)] + [row[-1]]
        lines.append("".join(cells).rstrip() if not row[-1] else "".join(cells))
    return "\n".join(lines)


def cmd_ps(argv: list[str]) -> int:
    """`docker ps [-a] [-q] [--no-trunc] [--format json|table|'{{json .}}'] [--filter name=N]`."""
    import time

    flags, args = parse_options(argv, {"--format": "format", "--filter": "filter", "-f": "filter"},
                           {"-a": "all", "--all": "all", "-q": "quiet", "--quiet": "quiet",
                            "--no-trunc": "no_trunc", "-s": "size", "--size": "size"}, "ps")
    if args:
        raise Fail("\"docker ps\" accepts no arguments.\nSee 'docker ps --help'.", 1)
    records = []
    with state.locked():
        for record in state.containers():
            if runtime.settle(record):
                state.save(record)
            records.append(record)
    records = records[::-1]  # newest first
    if not flags.get("all"):
        records = [r for r in records if r["state"]["status"] == "running"]
    for condition in flags.get("filter", []):
        key, _, value = condition.partition("=")
        if key != "name":
            raise Fail(f"invalid filter '{key}'", 1)
        records = [r for r in records if value in r["name"]]
    now = time.time()
    rows = [ps_row(r, now, bool(flags.get("no_trunc"))) for r in records]
    fmt = (flags.get("format") or ["table"])[-1]
    if flags.get("quiet"):
        for row in rows:
            print(row["ID"])
    elif fmt in ("json", "{{json .}}"):
        for row in rows:
            print(state.go_json(row, indent=None))
    elif fmt == "table":
        keys = ["ID", "Image", "Command", "RunningFor", "Status", "Ports", "Names"]
        print(table(["CONTAINER ID", "IMAGE", "COMMAND", "CREATED", "STATUS", "PORTS", "NAMES"],
                    [[row[k] for k in keys] for row in rows]))
    else:
        for row in rows:
            print(render_format(fmt, dict(row)))
    return 0


def cmd_images(argv: list[str]) -> int:
    """`docker images [-q] [--digests] [--no-trunc]`."""
    import time

    flags, _args = parse_options(argv, {"--format": "format"}, {"-q": "quiet", "--quiet": "quiet",
                                                               "--digests": "digests",
                                                          "--no-trunc": "no_trunc", "-a": "all"}, "images")
    rows = []
    now = time.time()
    for image in state.images()[::-1]:
        short = image["id"] if flags.get("no_trunc") else image["id"][7:19]
        created = _human_duration(now - state.parse_rfc3339(image["created"])) + " ago"
        size = f"{image['size'] / 1e9:.1f}GB"
        for tag in image.get("tags") or ["<none>"]:
            rows.append((image["repository"], tag, image["digest"], short, created, size))
    if flags.get("quiet"):
        for row in rows:
            print(row[3])
        return 0
    if flags.get("digests"):
        print(table(["REPOSITORY", "TAG", "DIGEST", "IMAGE ID", "CREATED", "SIZE"], [list(r) for r in rows]))
    else:
        print(table(["REPOSITORY", "TAG", "IMAGE ID", "CREATED", "SIZE"],
                    [[r[0], r[1], r[3], r[4], r[5]] for r in rows]))
    return 0
