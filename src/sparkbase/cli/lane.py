"""`sparkbase lane status|switch`: the serving lane the model-name proxy points at.

`status` reads the active lane from the proxy's `.env` (site.yaml `proxy:`) and runs its
pre-flight, runtime checks included (what its serving processes load); then it scrapes the
lane's own metrics endpoint on each node (`runtime.metrics`; in the lab, the stand-in's
loopback port) and shows what the session-load trigger reads there (running requests, KV
cache in use, long sessions), or why a node could not be scraped. The scrape informs; it
does not change the verdict. `switch LANE` takes its locks (`lane switch --help`), runs LANE's
pre-flight and, only when it qualifies (or `--override REASON` is given and the lane is
enabled), rewrites the one `KEY=` line of the `.env` atomically (every other byte, the
owner, group and mode kept), then records who/when/from/to in the override log (kind
`lane-switch`). A refused switch leaves the `.env` untouched and records nothing. Exit 0
done/qualified, 1 refused (or switched but not recorded: the message says so), 2 bad
configuration.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from sparkbase.cli.common import (
    add_global_options,
    add_lab_arguments,
    add_site_arguments,
    lab_path,
    lane_or_exit,
    load_site_or_exit,
    reason_or_exit,
)
from sparkbase.deploy.locks import LANE_SWITCH, LockHeld, NodeLockError, Owner, local_lock_dir
from sparkbase.gate.lane_metrics import LaneMetricsError, key_figures, scrape_lane
from sparkbase.gate.preflight import preflight
from sparkbase.gate.proxy_env import ProxyEnvError, active_lane, read_env
from sparkbase.gate.switch import SwitchNotRecorded, switch_locks, write_then_record
from sparkbase.gate.triggers import now
from sparkbase.model.site import Site
from sparkbase.policy.overrides import OverrideLogError, OverrideRecord, RecordKind, log_path, new_record
from sparkbase.text import shown
from sparkbase.transport import SshTarget, ssh_targets

#: `lane switch --help`: what it holds while it works, and what it does with a linked .env
SWITCH_HELP = """\
Point the proxy at LANE through the pre-flight gate. While it runs, the switch holds the
locks apply holds on every node of LANE (the local lock in <site>/.sparkbase/locks and the
node lock /run/sparkbase/apply.lock), and a switch lock of its own beside the .env
(.ENVNAME.sparkbase-switch.lock): a switch refuses, naming the holder's user, host and pid,
while an apply or another switch runs on any node of LANE, and no apply starts on them
until the switch is done. The .env is written first (atomically, keeping its owner, group
and mode) and the switch recorded in the override log after: a failed write records
nothing; a switch that could not be recorded is reported with exit 1. A node of LANE that
cannot be reached for its lock refuses the switch. A .env that is a symbolic link is
refused (exit 2), naming its target, and left as it is: the atomic rename would replace the
link, and writing through it would write a file the site does not name; point
proxy.env_file (or --env-file) at the target instead."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase lane`."""
    # argparse reads the whole rest of the line against this parser before the action's:
    # abbreviations would make an action's own option (`lane switch --log FILE`) ambiguous
    # with the global --log-level/--log-file
    parser.allow_abbrev = False
    sub = parser.add_subparsers(dest="lane_command", required=True, metavar="{status,switch}")
    status = sub.add_parser("status", help="the active lane (from the proxy's .env) and its checks")
    switch = sub.add_parser("switch", help="point the proxy at LANE, through the pre-flight gate",
                            description=SWITCH_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    switch.add_argument("lane", help="lane name (lanes/NAME.yaml)")
    switch.add_argument("--override", metavar="REASON", default=None,
                        help="switch despite pre-flight refusals (never to a disabled lane); recorded")
    for command in (status, switch):
        add_site_arguments(command)
        add_lab_arguments(command, "the nodes (the .env is LAB_DIR/proxy.env)")
        command.add_argument("--env-file", type=Path, default=None,
                             help="the proxy's .env (default: site.yaml proxy.env_file)")
        command.add_argument("--log", type=Path, default=None,
                             help="override log (default: <site>/.sparkbase/overrides.log)")
        command.add_argument("--parallel", type=int, default=16, metavar="N", help="nodes asked at once")
        add_global_options(command.add_argument_group("global options"), with_defaults=False)


def proxy_env_file(args: argparse.Namespace, site: Site) -> Path:
    """The proxy's .env: `--env-file`, else the lab's, else site.yaml `proxy.env_file`."""
    if args.env_file is not None:
        return Path(args.env_file)
    lab = lab_path(args)
    if lab is not None:
        return lab / "proxy.env"
    assert site.rules.proxy is not None
    return site.path(site.rules.proxy.env_file)


def run(args: argparse.Namespace) -> int:
    """Run `lane status` or `lane switch`."""
    site = load_site_or_exit(args)
    if site.rules.proxy is None:
        print("sparkbase: baselines/site.yaml has no proxy: block (env_file, key)", file=sys.stderr)
        return 2
    env = proxy_env_file(args, site)
    try:
        current = active_lane(read_env(env), site.rules.proxy.key, env)
    except ProxyEnvError as exc:
        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        return 2
    if args.lane_command == "status":
        return _status(args, site, current)
    return _switch(args, site, env, current)


def _preflight_lines(args: argparse.Namespace, site: Site, lane: str) -> tuple[list[str], bool]:
    """The pre-flight's refusal lines and whether any cannot be overridden."""
    lines, blocked, _runs = _preflight(args, site, lane)
    return lines, blocked


def _preflight(args: argparse.Namespace, site: Site, lane: str) -> tuple[list[str], bool, list[str]]:
    """The pre-flight's refusal lines, whether any cannot be overridden, and where the lane
    runs as a container (node, container, image digest)."""
    result = preflight(site, lane, _targets(args, site), args.parallel)
    return ([refusal.line() for refusal in result.refusals], bool(result.blocking_override),
            result.where_it_runs())


def _targets(args: argparse.Namespace, site: Site) -> dict[str, SshTarget]:
    """The nodes' SSH targets (unit tests replace it: no node is reached)."""
    return ssh_targets(site, lab_path(args))


def _status(args: argparse.Namespace, site: Site, current: str) -> int:
    if current not in site.lanes:
        print(f"active lane: {shown(current)} (no lanes/{shown(current)}.yaml)")
        return 1
    lines, _blocked, runs = _preflight(args, site, current)
    print(f"active lane: {shown(current)}")
    endpoint = endpoint_line(site, current)
    if endpoint is not None:
        print(f"  {shown(endpoint)}")
    for line in runs:
        print(f"  {shown(line)}")
    for line in lines:
        print(f"  {line}")
    for line in _metrics_lines(args, site, current):
        print(f"  {shown(line)}")
    verdict = "qualified" if not lines else f"NOT QUALIFIED ({len(lines)} reason(s))"
    print(f"lane {shown(current)}: {verdict}")
    return 0 if not lines else 1


def endpoint_line(site: Site, lane: str) -> str | None:
    """`API (openai): http://ADDRESS:PORT/v1 on NODE` from the lane's `runtime.endpoint` and
    the node's management address (None: the lane names no endpoint)."""
    runtime = site.lanes[lane].runtime
    endpoint = runtime.endpoint if runtime is not None else None
    if endpoint is None:
        return None
    node = site.inventory.nodes.get(endpoint.node)
    address = node.management_address if node is not None else None
    if address is None:
        return (f"API ({endpoint.api}): port {endpoint.port} on {endpoint.node} (the inventory gives no "
                "management_address)")
    host = address.split("/", 1)[0]
    host = f"[{host}]" if ":" in host else host
    return f"API ({endpoint.api}): http://{host}:{endpoint.port}/v1 on {endpoint.node}"


def _metrics_lines(args: argparse.Namespace, site: Site, lane: str) -> list[str]:
    """Per node, the figures the session-load trigger reads from the lane's own metrics
    endpoint, or why it could not be scraped (information: the verdict does not change)."""
    try:
        scrapes = scrape_lane(site, lane, lab_path(args), now())
    except LaneMetricsError as exc:
        return [f"metrics: {exc}"]
    triggers = [t for t in site.rules.triggers if t.kind == "session-load"]
    lines: list[str] = []
    for scrape in scrapes:
        if not scrape.scraped:
            where = f" {scrape.url}" if scrape.url else ""
            lines.append(f"metrics {scrape.node}: not scraped{where}: {scrape.error}")
        elif not triggers:
            lines.append(f"metrics {scrape.node}: {scrape.url}: answered (no session-load trigger names "
                         "the figures to read)")
        else:
            figures = "; ".join(key_figures(t, list(scrape.samples)) for t in triggers)
            lines.append(f"metrics {scrape.node}: {scrape.url}: {figures}")
    return lines


def _switch(args: argparse.Namespace, site: Site, env: Path, current: str) -> int:
    target = lane_or_exit(site, args.lane)
    reason = reason_or_exit(args.override, "--override")
    targets = _targets(args, site)
    nodes = {node: targets[node] for node in site.lanes[target].nodes}
    done = f"lane switch {shown(current)} -> {shown(target)}"
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(switch_locks(env, local_lock_dir(site.root), nodes,
                                            Owner(command=LANE_SWITCH), _note))
        except LockHeld as exc:
            print(f"{done}: REFUSED: {shown(exc)}; {shown(env)} untouched")
            return 1
        except NodeLockError as exc:
            print(f"{done}: REFUSED: {shown(exc)} (a node whose lock cannot be taken is never switched "
                  f"onto: an apply may be rebooting it); {shown(env)} untouched")
            return 1
        except OSError as exc:  # a lock file that cannot be used (a link planted there, a full disk)
            print(f"sparkbase: cannot take the switch's locks: {shown(exc)}", file=sys.stderr)
            print(f"{done}: not done; {shown(env)} untouched", file=sys.stderr)
            return 1
        return _switch_locked(args, site, env, target, reason)


def _note(line: str) -> None:
    print(f"sparkbase: {shown(line)}", file=sys.stderr)


def _switch_locked(args: argparse.Namespace, site: Site, env: Path, target: str, reason: str | None) -> int:
    """The switch with its locks held: the pre-flight, then the write and the record."""
    assert site.rules.proxy is not None
    key = site.rules.proxy.key
    try:  # read again now that no other switch runs; a link is refused before the pre-flight
        current = active_lane(read_env(env, follow=False), key, env)
    except ProxyEnvError as exc:
        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        print(f"lane switch -> {shown(target)}: not done; {shown(env)} untouched, nothing recorded",
              file=sys.stderr)
        return 2
    lines, blocked = _preflight_lines(args, site, target)
    for line in lines:
        print(line)
    if lines and (reason is None or blocked):
        why = "; --override cannot switch to a disabled lane" if blocked and reason else ""
        print(f"lane switch {shown(current)} -> {shown(target)}: REFUSED ({len(lines)} reason(s)){why}; "
              f"{shown(env)} untouched")
        return 1
    lane = site.lanes[target]
    said = reason if reason is not None else "pre-flight qualified"

    def record_for(before: str) -> OverrideRecord:
        return new_record(RecordKind.LANE_SWITCH, said, lane=target, switched_from=before,
                          baseline=lane.baseline, nodes=list(lane.nodes), refusals=lines)

    log = args.log or log_path(site.root)
    try:
        record = write_then_record(env, key, target, log, record_for)
    except SwitchNotRecorded as exc:
        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        print(f"lane switch {shown(exc.before)} -> {shown(target)}: DONE BUT NOT RECORDED: the proxy now "
              f"serves {shown(target)}; record this switch by hand", file=sys.stderr)
        return 1
    except (OverrideLogError, ProxyEnvError) as exc:
        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        print(f"lane switch {shown(current)} -> {shown(target)}: not done; {shown(env)} untouched, "
              "nothing recorded", file=sys.stderr)
        return 1
    note = f" OVERRIDDEN ({len(lines)} refusal(s)): \"{shown(reason)}\"" if lines else ""
    print(f"lane switch {shown(record.switched_from or '')} -> {shown(target)}: done{note} "
          f"(recorded by {shown(record.who)})")
    return 0
