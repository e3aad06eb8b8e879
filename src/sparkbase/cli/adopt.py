"""Adopt a running fleet: read every node in one SSH round trip (the audit's fact script,
changing nothing) and write a complete site to DIR: the inventory (nodes, rank order,
management addresses, the fabric as cabled and addressed), one baseline per group of
identical nodes (every value a node tells marked `captured`, node and time; `managed: []`:
sparkbase writes nothing on day one), the site contract and one lane file per serving
engine found, with the ssh_config and known_hosts the nodes were reached with.

Nodes: `--node ALIAS…`, else every `Host` alias of the ssh_config that is not a pattern;
`--limit` narrows either. What no node can tell (which lane is production, the proxy's
.env and key, site decisions, the baseline's version) is written as a placeholder and
listed as a question with its FILE:LINE. The capture time is `--time` (default: now) and
appears only in `sources:`, so the same fleet and time give the same bytes.

DIR must be missing or empty (the site is written to a temporary directory beside it,
then renamed into place); `--force` writes adopt's files into a non-empty DIR, each
replaced atomically, and keeps every other file. Exit 0 written and valid, 1 written but
the site does not validate (the problems are listed), 2 bad usage, 3 a node unreachable
(nothing written).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import paramiko
from pydantic import TypeAdapter, ValidationError

from sparkbase.adopt import Adopted, Starter, adopt_site
from sparkbase.adopt.baselines import adopt_plan
from sparkbase.adopt.writing import Question
from sparkbase.atomicfile import write_atomic
from sparkbase.cli.common import add_lab_arguments, lab_path
from sparkbase.errors import ConfigError, Severity
from sparkbase.facts.collect import gather_fleet
from sparkbase.facts.model import Unreachable
from sparkbase.model.provenance import UtcTime
from sparkbase.model.site import NAME_PATTERN, load_site
from sparkbase.model.yamlio import Location, load_yaml
from sparkbase.starter import starter_root
from sparkbase.text import shown
from sparkbase.transport import SshReach, SshTarget, read_plain_file, ssh_config_problem, targets_for
from sparkbase.transport.paramiko_import import import_paramiko


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase adopt`."""
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="where to write the site (missing or empty, unless --force)")
    parser.add_argument("--ssh-config", type=Path, default=None, metavar="FILE",
                        help="OpenSSH client config with one Host alias per node (not with --lab)")
    parser.add_argument("--known-hosts", type=Path, default=None, metavar="FILE",
                        help="known_hosts holding every node's host key (not with --lab)")
    parser.add_argument("--node", nargs="+", metavar="ALIAS", default=None,
                        help="the nodes' aliases (default: every Host of the ssh_config that is not a "
                        "pattern)")
    parser.add_argument("--limit", nargs="+", metavar="NODE", default=None, help="only these nodes")
    parser.add_argument("--time", default=None, metavar="ISO",
                        help="the capture time written in sources: (UTC, e.g. 2026-12-01T02:00:00Z; "
                        "default: now)")
    parser.add_argument("--force", action="store_true",
                        help="write into a non-empty DIR: adopt's files replaced, every other file kept")
    add_lab_arguments(parser, "the nodes")


def _fail(message: str, status: int = 2) -> int:
    print(f"sparkbase: adopt: {shown(message)}", file=sys.stderr)
    return status


class _Refused(Exception):
    """Bad usage or input: said, exit 2."""


def _time(given: str | None) -> str:
    """The capture time: `given` (checked: ISO-8601 UTC), else now."""
    if given is None:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        return str(TypeAdapter(UtcTime).validate_python(given))
    except ValidationError:
        raise _Refused(f"--time {given}: not an ISO-8601 UTC time (e.g. 2026-12-01T02:00:00Z)") from None


def _ssh_files(args: argparse.Namespace) -> tuple[Path, Path, Path | None]:
    """The ssh_config, the known_hosts, and the lab directory (None: not the lab)."""
    lab = lab_path(args)
    if lab is not None:
        if args.ssh_config is not None or args.known_hosts is not None:
            raise _Refused("--lab reaches the lab with its own ssh files: give no --ssh-config/--known-hosts")
        return lab / "ssh_config", lab / "known_hosts", lab
    if args.ssh_config is None or args.known_hosts is None:
        raise _Refused("give --ssh-config FILE and --known-hosts FILE (or --lab for the emulated fleet)")
    return args.ssh_config, args.known_hosts, None


def aliases_of(config_text: str) -> list[str]:
    """Every `Host` alias of an ssh_config that names one host (no `*`, `?` or `!`), sorted."""
    import_paramiko()
    hosts = paramiko.SSHConfig.from_text(config_text).get_hostnames()
    return sorted(host for host in hosts if host and not any(char in host for char in "*?!"))


def _nodes(args: argparse.Namespace, config: Path) -> list[str]:
    problem = ssh_config_problem(config)
    if problem is not None:
        raise _Refused(problem)
    found = aliases_of(read_plain_file(config).decode("utf-8"))
    nodes = sorted(set(args.node)) if args.node else found
    odd = [node for node in nodes if not re.fullmatch(NAME_PATTERN, node)]
    if odd:
        raise _Refused(f"{', '.join(odd)}: not usable as node names (letters, digits, . _ -)")
    unknown = [node for node in nodes if node not in found]
    if unknown:
        raise _Refused(f"no Host {', '.join(unknown)} in {config} (have: {', '.join(found) or 'none'})")
    if args.limit:
        strangers = [node for node in args.limit if node not in nodes]
        if strangers:
            raise _Refused(f"--limit {', '.join(strangers)}: not among the nodes ({', '.join(nodes)})")
        nodes = [node for node in nodes if node in args.limit]
    if not nodes:
        raise _Refused(f"no node to adopt: {config} has no Host alias")
    return nodes


def load_starter() -> Starter:
    """The starter site's site baseline (the one its inventory assigns), the files it
    extends, and its site contract."""
    root = starter_root()
    site = load_site(root)
    first = min(site.inventory.nodes.values(), key=lambda node: node.rank)
    name = first.baseline
    ancestors: dict[str, str] = {}
    parent = load_yaml(root / "baselines" / f"{name}.yaml").data.get("extends")
    while isinstance(parent, str) and parent not in ancestors:
        file = root / "baselines" / f"{parent}.yaml"
        ancestors[parent] = file.read_text(encoding="utf-8")
        parent = load_yaml(file).data.get("extends")
    return Starter(site.baselines[name], (root / "baselines" / f"{name}.yaml").read_text(encoding="utf-8"),
                   ancestors, (root / "baselines" / "site.yaml").read_text(encoding="utf-8"))


def run(args: argparse.Namespace) -> int:
    """Read the nodes, write the site, list the questions."""
    try:
        config, known_hosts, lab = _ssh_files(args)
        nodes = _nodes(args, config)
        when = _time(args.time)
        _check_out(args.out, args.force)
        targets = _targets(nodes, config, known_hosts, lab)
    except _Refused as exc:
        return _fail(str(exc))
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem.format(Path.cwd()), file=sys.stderr)
        return 2
    starter = load_starter()
    plan = adopt_plan(starter.template)
    results = gather_fleet(targets, dict.fromkeys(nodes, plan))
    down = [result for result in results.values() if isinstance(result, Unreachable)]
    if down:
        for result in down:
            print(f"sparkbase: adopt: {result.node} unreachable ({result.kind}): {result.reason}",
                  file=sys.stderr)
        return _fail("nothing written: every node must answer", 3)
    facts = {node: result for node, result in results.items() if not isinstance(result, Unreachable)}
    ssh_files = {"inventory/ssh_config": config.read_text(encoding="utf-8"),
                 "inventory/known_hosts": known_hosts.read_text(encoding="utf-8")}
    adopted = adopt_site(facts, starter, when, ssh_files)
    try:
        _write(args.out, adopted.files, args.force)
    except OSError as exc:
        return _fail(f"{args.out}: cannot write: {exc.strerror or exc}")
    return _report(args.out, adopted)


def _targets(nodes: list[str], config: Path, known_hosts: Path, lab: Path | None) -> dict[str, SshTarget]:
    reach = SshReach(
        aliases={node: node for node in nodes}, config=config, known_hosts=known_hosts,
        config_at=Location(config, 1, 1), known_hosts_at=Location(known_hosts, 1, 1),
        user="root", sudo=False, user_from_inventory=False, connect_timeout=5.0,
        command_timeout=120.0, operation_timeout=1800.0,
    )
    return dict(targets_for(reach, lab))


def _check_out(out: Path, force: bool) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise _Refused(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise _Refused(f"{out} is not empty: nothing read or written (--force writes adopt's files "
                       "into it and keeps every other file)")


def _write(out: Path, files: dict[str, str], force: bool) -> None:
    """The files into `out`: a missing or empty `out` whole, from a temporary directory
    beside it renamed into place; a non-empty one (`force`) file by file, each atomically."""
    if out.is_dir() and any(out.iterdir()):
        for rel, text in files.items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            write_atomic(out / rel, text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{out.name}.adopt-", dir=out.parent))
    try:
        for rel, text in files.items():
            (temp / rel).parent.mkdir(parents=True, exist_ok=True)
            write_atomic(temp / rel, text, durable=False)
        os.chmod(temp, 0o755)  # noqa: S103 - a site directory, as `mkdir` makes one (mkdtemp: 0700)
        if out.is_dir():
            out.rmdir()  # empty: checked before the nodes were read
        os.rename(temp, out)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def _validated(out: Path) -> tuple[list[str], list[Question]]:
    """The site's errors (as printed) and its placeholder values as questions."""
    root = out.resolve()
    try:
        site = load_site(root)
    except ConfigError as exc:
        return [p.format(Path.cwd()) for p in exc.problems if p.severity is Severity.ERROR], []
    prefix = "placeholder: "
    asked = [
        Question(p.file.resolve().relative_to(root).as_posix(), p.line, p.message.removeprefix(prefix),
                 p.path.removeprefix("sources."))
        for p in site.warnings
        if p.severity is Severity.WARNING and p.path.startswith("sources.") and p.message.startswith(prefix)
    ]
    return [], asked


def _report(out: Path, adopted: Adopted) -> int:
    errors, placeholders = _validated(out)
    seen = {(q.file, q.line) for q in adopted.questions}
    questions = sorted([*adopted.questions, *(q for q in placeholders if (q.file, q.line) not in seen)])
    nodes = sum(len(group.nodes) for group in adopted.groups)
    print(f"adopt: wrote {shown(out)}: {nodes} node(s), {len(adopted.groups)} baseline(s) "
          f"({', '.join(g.name for g in adopted.groups)}), {len(adopted.lanes)} lane(s)"
          + (f" ({', '.join(lane.name for lane in adopted.lanes)})" if adopted.lanes else ""))
    if adopted.order is not None:
        print(f"rank order: {', '.join(adopted.order.nodes)} ({adopted.order.how})")
    for note in adopted.notes:
        print(f"note: {shown(note)}")
    print(f"{len(questions)} question(s) no node can answer (each a placeholder at FILE:LINE in "
          f"{shown(out)}):")
    for question in questions:
        print(f"  {shown(question.shown())}")
    if errors:
        for error in errors:
            print(error, file=sys.stderr)
        return _fail(f"{out} was written, but the site does not validate ({len(errors)} error(s))", 1)
    return 0
