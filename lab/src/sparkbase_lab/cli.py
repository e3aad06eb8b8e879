"""The emulated fleet: N DGX Sparks on this machine, reachable over SSH on 127.0.0.1.

  sparkbase lab up [--nodes N] [--port-base P] [--fresh]   start (idempotent)
  sparkbase lab up --as-found [--site DIR]                 the site's fleet as it runs today
  sparkbase lab status [--json]                            what runs
  sparkbase lab ssh NODE [COMMAND...]                      shell or one command
  sparkbase lab reboot NODE                                reboot one node
  sparkbase lab fault NODE KIND [ARG] [--clear]            inject or clear a fault
  sparkbase lab console NODE enroll-mok                    a person at the console at the next boot
  sparkbase lab lane start|stop|restart LANE [--site DIR]  run a lane's stand-in on its nodes
  sparkbase lab down [--purge]                             stop everything

The lab dir is --dir, else $SPARKBASE_LAB_DIR, else /var/lib/sparkbase/lab. `down` keeps
the node disks so the next `up` resumes the same nodes; `down --purge` or `up --fresh`
makes them factory-fresh. Everything listens on 127.0.0.1 only.
"""

# The lab's own command module: the product's `sparkbase` lists it under `lab`
# (`sparkbase.cli.main.LAB_COMMAND`) and imports it only when the lab is installed.

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparkbase.cli.common import add_global_options
from sparkbase_lab import faults
from sparkbase_lab.fleet import Lab, LabError

if TYPE_CHECKING:
    from sparkbase.console import Table
    from sparkbase.model.site import Site
    from sparkbase_lab.fleet import NodeStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare `sparkbase lab` and its sub-commands."""
    # argparse reads the whole rest of the line against this parser before the action's:
    # abbreviations would let this parser take an action's own option for a prefix of its
    # own or of a global one (as `lane switch --log FILE` was taken for --log-level/--log-file)
    parser.allow_abbrev = False
    parser.add_argument("--dir", help="lab directory (default: $SPARKBASE_LAB_DIR or "
                        "/var/lib/sparkbase/lab)")
    sub = parser.add_subparsers(dest="lab_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start the nodes (idempotent)")
    up.add_argument("--nodes", "-n", type=int, default=4, help="how many nodes (default 4)")
    up.add_argument("--port-base", type=int, default=None,
                    help="port of spark1; sparkN uses base+N-1 (default 2201)")
    up.add_argument("--fresh", action="store_true", help="wipe node disks first (factory-fresh)")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for sshd")
    up.add_argument("--as-found", action="store_true",
                    help="the nodes as the site set them up by hand, serving the production lane from a "
                         "container; no sparkbase record on them (resumed when the disks already are)")
    up.add_argument("--site", default=".", help="with --as-found: the site whose inventory, lane and "
                    "baseline the nodes follow (default: here or a parent)")
    down = sub.add_parser("down", help="stop every node and process of the lab")
    down.add_argument("--purge", action="store_true", help="also wipe the node disks")
    status = sub.add_parser("status", help="nodes, ports, PIDs, kernel, memory")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    reboot = sub.add_parser("reboot", help="reboot one node and wait until it is back")
    reboot.add_argument("node")
    reboot.add_argument("--no-wait", action="store_true")
    ssh = sub.add_parser("ssh", help="interactive shell, or run COMMAND and return its status")
    ssh.add_argument("node")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    fault = sub.add_parser("fault", help="inject (or --clear) an emulated hardware fault")
    fault.add_argument("node")
    fault.add_argument("kind", choices=faults.KINDS)
    fault.add_argument("arg", nargs="?", help="HCA/netdev for link-down, RELEASE for kernel-panic, "
                       "CONTAINER for container-env/-image, netdev for stale-address, the build (a lane "
                       "unit) for build-* (default: every build)")
    fault.add_argument("--clear", action="store_true")
    console = sub.add_parser("console", help="a person at a node's console at its next boot (e.g. to "
                             "enrol a pending MOK in MokManager)")
    console.add_argument("node")
    console.add_argument("action", choices=("enroll-mok",),
                         help="enroll-mok: Enroll MOK → Continue → Yes → the password → Reboot")
    lane = sub.add_parser("lane", help="start/stop a lane's serving stand-in on its nodes (its unit)")
    lane.add_argument("verb", choices=("start", "stop", "restart"))
    lane.add_argument("lane", help="lane name (lanes/NAME.yaml)")
    lane.add_argument("--site", default=".", help="site directory (default: here or a parent)")
    for action in (up, down, status, reboot, fault, console, lane):  # ssh: what follows NODE is the command
        add_global_options(action.add_argument_group("global options"), with_defaults=False)


def run(args: argparse.Namespace) -> int:
    """Run one `sparkbase lab` action."""
    try:
        lab = Lab(args.dir, getattr(args, "port_base", None))
        action = args.lab_command
        if action == "up" and args.as_found:
            return _up_as_found(lab, args)
        if action == "up":
            import time

            started = time.monotonic()
            if lab.up(args.nodes, fresh=args.fresh, timeout=args.timeout):
                print(f"lab up: {args.nodes} nodes in {time.monotonic() - started:.1f}s "
                      f"({lab.dir})")
            else:
                print(f"lab already up with {args.nodes} nodes ({lab.dir})")
            print(f"  ssh -F {lab.ssh_config_path} spark1")
            return 0
        if action == "down":
            was_up = lab.down(purge=args.purge)
            print("lab down" if was_up else "lab was not running",
                  "(node disks wiped)" if args.purge else "(node disks kept)")
            return 0
        if action == "status":
            nodes = lab.status()
            if args.json:
                print(json.dumps({"dir": str(lab.dir), "up": lab.is_up(),
                                  "ssh_config": str(lab.ssh_config_path),
                                  "nodes": [n.to_json() for n in nodes]}, indent=2))
                return 0
            print(f"lab {lab.dir}: {'up' if lab.is_up() else 'down'}")
            from sparkbase.console import print_table

            print_table(status_table(nodes))
            return 0
        if action == "reboot":
            lab.reboot(args.node, wait=not args.no_wait)
            print(f"{args.node} rebooted")
            return 0
        if action == "ssh":
            command = list(args.command)
            if command and command[0] == "--":
                command = command[1:]
            if args.node not in lab.node_names:
                raise LabError(f"unknown node {args.node!r} (nodes: {', '.join(lab.node_names)})")
            argv = lab.ssh_argv(args.node, command, tty=not command and sys.stdin.isatty())
            sys.stdout.flush()
            os.execvp(argv[0], argv)  # noqa: S606 (become ssh, as `ssh` itself would run)
        if action == "lane":
            return _lane(lab, args)
        if action == "console":
            from sparkbase_lab import console as person

            print(f"{args.node}: a person at the console: {person.request(lab, args.node, args.action)}")
            return 0
        if action == "fault":
            if args.clear:
                faults.clear(lab, args.node, args.kind, args.arg)
                print(f"{args.node}: fault {args.kind} cleared")
            else:
                faults.inject(lab, args.node, args.kind, args.arg)
                print(f"{args.node}: fault {args.kind} injected")
            return 0
    except (LabError, ValueError) as exc:
        print(f"sparkbase lab: {exc}", file=sys.stderr)
        return 1
    return 2


def status_table(nodes: Sequence[NodeStatus]) -> Table:
    """`lab status` as a table: one row per node, `-` where a value is unknown; a node's
    state in colour on a terminal."""
    from sparkbase.console import Column, Table

    return Table(
        (
            Column("NODE", wrap=False),
            Column("STATE", styles={"up": "green", "unreachable": "bold red", "down": "yellow"}),
            Column("PORT", align="right"),
            Column("PID", align="right"),
            Column("KERNEL"),
            Column("PAGE", align="right"),
            Column("RSS", align="right"),
            Column("FAULTS", styles={"-": "dim"}),
        ),
        [
            (
                n.name,
                n.state,
                str(n.port),
                str(n.pid or "-"),
                n.release or "-",
                str(n.page_size or "-"),
                f"{n.rss_kb // 1024}M" if n.pid else "-",
                ",".join(sorted(n.faults)) or "-",
            )
            for n in nodes
        ],
    )


def _site_of(args: argparse.Namespace) -> Site | None:
    """The site `--site` names, or None after saying on stderr that it is invalid."""
    from pathlib import Path

    from sparkbase.errors import ConfigError
    from sparkbase.model.site import load_site
    from sparkbase.model.site_files import find_site_root

    try:
        return load_site(find_site_root(Path(args.site)))
    except ConfigError as exc:
        print(f"sparkbase lab: the site is invalid ({len(exc.problems)} problem(s)); run sparkbase validate",
              file=sys.stderr)
        return None


def _up_as_found(lab: Lab, args: argparse.Namespace) -> int:
    """`lab up --as-found`: the site's fleet as it runs today (sparkbase_lab.as_found)."""
    import time

    from sparkbase_lab import as_found

    site = _site_of(args)
    if site is None:
        return 2
    started = time.monotonic()
    if as_found.up(lab, site, fresh=args.fresh, timeout=args.timeout):
        took = time.monotonic() - started
        print(f"lab up as found: {', '.join(lab.node_names)} in {took:.1f}s ({lab.dir})")
        print(f"  lane {as_found.LANE} in container {as_found.CONTAINER} from {as_found.IMAGE}")
    else:
        print(f"lab already up as found ({lab.dir})")
    print(f"  ssh -F {lab.ssh_config_path} spark1 docker inspect {as_found.CONTAINER}")
    return 0


def _lane(lab: Lab, args: argparse.Namespace) -> int:
    """`lab lane start|stop|restart LANE`: the lane's unit on each of its nodes."""
    from sparkbase_lab import lanes

    site = _site_of(args)
    if site is None:
        return 2
    if args.lane not in site.lanes:
        print(f"sparkbase lab: no lane {args.lane!r}", file=sys.stderr)
        return 2
    if args.verb == "restart":
        for node in site.lanes[args.lane].nodes:
            lanes.restart(lab, site, args.lane, node)
        nodes = list(site.lanes[args.lane].nodes)
    else:
        nodes = (lanes.start if args.verb == "start" else lanes.stop)(lab, site, args.lane)
    print(f"lane {args.lane}: {lanes.unit_name(site, args.lane)} {args.verb}ed on {', '.join(nodes)}")
    return 0
