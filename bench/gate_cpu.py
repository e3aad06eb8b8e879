"""The launch gate's own cost, paired: wall and CPU of `preflight` and `audit`, this tree
against an older checkout, on one converged emulated fleet.

    .venv/bin/python bench/gate_cpu.py --lab-dir DIR --site SITE [--before TREE] [--pairs 15]

Each command runs as a whole process (as a launch script starts it), its CPU taken from the
kernel's accounting of that process and its threads (`os.wait4`): sparkbase's own cost,
without the emulated nodes' sshd and tools, which on a real fleet run on the nodes' own
cores. The machine's busy CPU during the run (`/proc/stat`, every process: the client, the
nodes' sshd, fact scripts and command servers, and whatever else runs) is shown beside it:
on a quiet machine, it minus the client's is what the nodes spent answering.

With `--before TREE`, every command is run from TREE's code too (its own copy of the site,
so each keeps its own cache), A then B then A…, and each ratio is taken pair by pair, so
load that comes and goes lands on both sides alike. One warm-up run of each fills the
site caches first. Prints medians (and the spread) as a Markdown table; 127.0.0.1 only (the
lab's nodes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Sample:
    """One run: wall seconds, CPU seconds (user + system), exit status, and the machine's busy
    CPU seconds meanwhile."""

    wall: float
    cpu: float
    status: int
    machine: float


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine since boot (`/proc/stat`: all but idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def run_once(argv: list[str], env: dict[str, str]) -> Sample:
    """Run `argv` to completion; its wall clock and the CPU the kernel charged to it."""
    busy = machine_busy()
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    return Sample(wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status),
                  machine_busy() - busy)


def commands(lane: str, lab: Path) -> dict[str, list[str]]:
    """The gate's commands, by name (the site is appended per side)."""
    return {
        f"preflight {lane}": ["preflight", lane, "--lab-dir", str(lab)],
        "audit --format json": ["audit", "--format", "json", "--output", "/dev/null", "--lab-dir", str(lab)],
        "--help": ["--help"],
    }


def side_env(tree: Path) -> dict[str, str]:
    """The environment that runs sparkbase from `tree`'s code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "src")
    env.pop("SPARKBASE_NO_SITE_CACHE", None)
    return env


def argv_for(command: list[str], site: Path) -> list[str]:
    """The whole command line (`--help` takes no site)."""
    base = [str(Path(sys.executable).parent / "sparkbase")]  # the entry point, as installed
    return [*base, *command] if command == ["--help"] else [*base, *command, "--site", str(site)]


def median_spread(values: list[float]) -> str:
    """`median (min–max)`, three decimals."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lab-dir", type=Path, required=True, help="a converged lab (up)")
    parser.add_argument("--site", type=Path, required=True, help="the site the lab was converged to")
    parser.add_argument("--before", type=Path, default=None, help="an older checkout to pair against")
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--lane", default="dsv41-flash")
    args = parser.parse_args()

    sides = {"after": (REPO, args.site)}
    with tempfile.TemporaryDirectory(prefix="gate-cpu-") as scratch:
        if args.before is not None:
            before_site = Path(scratch) / "site"
            shutil.copytree(args.site, before_site, ignore=shutil.ignore_patterns(".sparkbase"))
            sides["before"] = (args.before, before_site)
        table = commands(args.lane, args.lab_dir)
        samples: dict[tuple[str, str], list[Sample]] = {}
        for name, command in table.items():
            for side, (tree, site) in sides.items():
                run_once(argv_for(command, site), side_env(tree))  # warm-up: fills the caches
                samples[(name, side)] = []
        for _ in range(args.pairs):
            for name, command in table.items():
                for side, (tree, site) in sides.items():
                    samples[(name, side)].append(run_once(argv_for(command, site), side_env(tree)))
    print(f"{args.pairs} pairs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print()
    print("| command | side | exit | wall, median (spread) | CPU, median (spread) | CPU after / before "
          "| machine CPU, median (spread) | machine after / before |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in table:
        for side in sides:
            runs = samples[(name, side)]
            ratio = machine_ratio = ""
            if side == "after" and "before" in sides:
                pairs = list(zip(runs, samples[(name, "before")], strict=True))
                ratio = f"{statistics.median(a.cpu / b.cpu for a, b in pairs):.2f}×"
                machine = statistics.median(a.machine / max(b.machine, 0.01) for a, b in pairs)
                machine_ratio = f"{machine:.2f}×"
            codes = ",".join(sorted({str(r.status) for r in runs}))
            print(f"| `{name}` | {side} | {codes} | {median_spread([r.wall for r in runs])} | "
                  f"{median_spread([r.cpu for r in runs])} | {ratio} | "
                  f"{median_spread([r.machine for r in runs])} | {machine_ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
