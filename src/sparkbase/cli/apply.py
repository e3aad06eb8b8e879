"""Converge nodes to their baselines. Changes that need a reboot are staged and reported as
"reboot pending" unless --allow-reboot: then nodes reboot one at a time, each verified
(kernel, page size, command line, modules) before the next; the rollout stops at the first
node that fails (at once when it comes back with a host key known_hosts does not hold). A
run cut short is finished by the next: follow-up steps (update-grub, daemon-reload, netplan
apply, update-initramfs) are decided from the node's state, and a reboot staged and not done
stays pending until a reboot clears it. A node that serves a lane (a process there matches
the lane's runtime.match strings, or its container runs: never a unit name alone) is not
rebooted: its changes are staged and the refusal names the lane and its PIDs, unless
--drain, which first stops the lane the way it runs on every node the lane spans (its unit,
then `docker stop` its container; a tensor-parallel lane goes down as a whole), waits until
no process of it is left (else no node is rebooted, naming the PIDs left) and says which
lanes went down. A lane with no unit nor container cannot be drained. A baseline that
breaks the site contract needs --override-policy REASON, recorded in
<site>/.sparkbase/overrides.log."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from sparkbase.cli.common import add_site_arguments, add_target_arguments, reason_or_exit
from sparkbase.cli.deploying import add_deploy_arguments, prepared_run, print_report
from sparkbase.console import Progress
from sparkbase.deploy.assign import breaches_by_baseline
from sparkbase.deploy.runner import Options, apply, plan
from sparkbase.model.site import Site
from sparkbase.policy.overrides import OverrideLogError, RecordKind, append_record, log_path, new_record
from sparkbase.text import shown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase apply`."""
    add_site_arguments(parser)
    add_target_arguments(parser)
    add_deploy_arguments(parser)
    parser.add_argument("--allow-reboot", action="store_true",
                        help="reboot nodes that need it, one at a time, verifying each")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--override-policy", metavar="REASON", default=None,
                        help="apply a baseline that breaks the site contract; REASON is logged")
    parser.add_argument("--drain", action="store_true",
                        help="with --allow-reboot: a node that serves a lane is rebooted only after "
                        "the lane is stopped the way it runs (its unit, then its container) on every "
                        "node the lane spans and no process of it is left (without it, such a node is "
                        "refused and its changes are staged)")
    parser.add_argument("--reboot-timeout", type=float, default=180.0, metavar="SECONDS",
                        help="how long to wait for a rebooted node's SSH (default 180)")


def run(args: argparse.Namespace) -> int:
    """Apply; exit 0 converged, 1 failed/refused/reboot pending, 2 bad config, 3 unreachable."""
    site, nodes, lab, mok = prepared_run(args)
    reason = reason_or_exit(args.override_policy, "--override-policy")
    breaches = breaches_by_baseline(site, nodes)
    if breaches and reason is None:
        for name, messages in breaches.items():
            print(f"sparkbase: refusing: baseline '{shown(name)}' breaks the site contract:", file=sys.stderr)
            for message in messages:
                print(f"  - {shown(message)}", file=sys.stderr)
        print("sparkbase: pass --override-policy \"REASON\" to apply it anyway (the override is logged)",
              file=sys.stderr)
        return 1
    options = Options(lab=lab, mok=mok, allow_reboot=args.allow_reboot,
                      reboot_timeout=args.reboot_timeout, drain=args.drain)
    if not args.yes:
        if not sys.stdin.isatty():
            print("sparkbase: apply changes nodes: pass --yes (no terminal to confirm on)", file=sys.stderr)
            return 2
        with Progress("plan") as progress:
            preview = plan(site, nodes, replace(options, progress=progress.step))
        print_report(preview, False, details=True)
        if preview.exit_code() == 0:
            return 0
        if input("apply these changes? [y/N] ").strip().lower() not in ("y", "yes"):
            print("sparkbase: nothing was done", file=sys.stderr)
            return 1
    if reason is not None and not _record_overrides(site, nodes, breaches, reason):
        return 1
    with Progress("apply") as progress:
        report = apply(site, nodes, replace(options, progress=progress.step))
    print_report(report, args.json, details=False)
    return report.exit_code()


def _record_overrides(site: Site, nodes: list[str], breaches: dict[str, list[str]], reason: str) -> bool:
    """One `apply-override` record per contract-breaking baseline; False (nothing may be
    applied) when the override log cannot be written."""
    log = log_path(site.root)
    for name, messages in breaches.items():
        moved = [n for n in nodes if site.inventory.nodes[n].baseline == name]
        record = new_record(RecordKind.APPLY, reason, baseline=name, nodes=moved, refusals=messages)
        try:
            append_record(log, record)
        except OverrideLogError as exc:
            print(f"sparkbase: {shown(exc)}", file=sys.stderr)
            print("sparkbase: the override could not be recorded; nothing was applied", file=sys.stderr)
            return False
        print(
            f"sparkbase: policy override for {shown(', '.join(moved))} -> {shown(name)} recorded in "
            f"{shown(log)}",
            file=sys.stderr,
        )
    return True
