"""sparkbase benchmarks on the emulated fleet.

    .venv/bin/python bench/run.py [--sizes 4 16 32] [--runs 5] [--quick]

For each fleet size: bring up a lab, converge it with `sparkbase apply`, then time, in
interleaved rounds (so machine noise lands on every tool alike and cancels in the ratios):
`sparkbase audit`, the same checks as a plain per-assertion pytest-testinfra suite (serial
and with pytest-xdist), Ansible's fact gathering (`ansible -m setup`), and at 4 nodes
`sparkbase preflight`, a no-op `sparkbase apply` against a no-op plain `pyinfra` run of the
same deploy, `sparkbase --help` and `sparkbase validate`. At the largest size it also
times the audit at several pool sizes. Results go to docs/benchmarks/ (Markdown table,
PNG plot, raw JSON) with the machine and the date.

Everything runs against 127.0.0.1 only. Labs are brought down at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
SPARKBASE = str(VENV_BIN / "sparkbase")
OUT = REPO / "docs" / "benchmarks"
BENCH_VENV = Path(os.environ.get("SPARKBASE_BENCH_VENV", "/var/lib/sparkbase/bench-venv"))


@dataclass
class Series:
    """Wall-clock samples of one measured command."""

    name: str
    samples: list[float] = field(default_factory=list)
    failures: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def spread(self) -> tuple[float, float]:
        return (min(self.samples), max(self.samples)) if self.samples else (float("nan"),) * 2


def timed(argv: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> float:
    """Run `argv`, return seconds; raise if the exit status is not in `ok`."""
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return elapsed


def make_site(root: Path, nodes: int) -> Path:
    """A copy of the shipped site with an inventory of `nodes` nodes cabled as one ring."""
    site = root / f"site-{nodes}"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    shutil.copytree(REPO / "baselines", site / "baselines")
    shutil.copytree(REPO / "lanes", site / "lanes")
    lines = ["ssh:", "  user: root", "nodes:"]
    views = {0: ("enp1s0f0np0", "enP2p1s0f0np0"), 1: ("enp1s0f1np1", "enP2p1s0f1np1")}
    for index in range(nodes):
        name = f"spark{index + 1}"
        after = (index + 1) % nodes
        before = (index - 1) % nodes
        lines += [
            f"  {name}:",
            f"    ssh_host: {name}",
            f"    rank: {index}",
            "    baseline: site-stock-6.17-4k",
            "    links:",
        ]
        for port, peer, peer_port, cable, host in (
            (0, after, 1, index, 1),
            (1, before, 0, before, 11),
        ):
            subnet = f"192.168.{100 + cable}.0/24"
            a, b = views[port]
            lines += [
                f"      - port: {port}",
                f"        peer: spark{peer + 1}",
                f"        peer_port: {peer_port}",
                f"        subnet: {subnet}",
                f"        addresses: {{{a}: 192.168.{100 + cable}.{host}/24, "
                f"{b}: 192.168.{100 + cable}.{host + 1}/24}}",
            ]
    (site / "inventory").mkdir()
    (site / "inventory" / "site.yaml").write_text("\n".join(lines) + "\n")
    return site


def ensure_ansible() -> Path | None:
    """ansible from PyPI in a venv of its own (it is the benchmark's reference, not a dependency)."""
    ansible = BENCH_VENV / "bin" / "ansible"
    if ansible.exists():
        return ansible
    try:
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run([str(BENCH_VENV / "bin" / "pip"), "install", "-q", "ansible-core>=2.16"], check=True)
    except subprocess.CalledProcessError as exc:
        print(f"bench: ansible could not be installed ({exc}); skipping that column", file=sys.stderr)
        return None
    return ansible


def ansible_inventory(lab: Path, nodes: int, dest: Path) -> Path:
    hosts = "\n".join(f"spark{i + 1}" for i in range(nodes))
    ssh_args = f"-F {lab / 'ssh_config'}"
    dest.write_text(
        f"[spark]\n{hosts}\n\n[spark:vars]\nansible_ssh_common_args='{ssh_args}'\n"
        "ansible_python_interpreter=/usr/bin/python3\n"
    )
    return dest


def interleave(rounds: int, commands: dict[str, Callable[[], float]]) -> dict[str, Series]:
    """Run every command once per round, in the same order, `rounds` times."""
    series = {name: Series(name) for name in commands}
    for _ in range(rounds):
        for name, run in commands.items():
            try:
                series[name].samples.append(run())
            except RuntimeError as exc:
                series[name].failures += 1
                print(f"bench: {name} failed: {exc}", file=sys.stderr)
    return series


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="+", type=int, default=[4, 16, 32])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pools", nargs="+", type=int, default=[1, 4, 8, 16, 32])
    parser.add_argument("--port-base", type=int, default=2701)
    parser.add_argument("--no-ansible", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sparkbase-bench-"))
    env = dict(os.environ)
    ansible = None if args.no_ansible else ensure_ansible()
    results: dict[str, dict[str, Series]] = {}
    fixed: dict[str, Series] = {}

    fixed |= interleave(
        args.runs * 2,
        {
            "sparkbase --help": partial(timed, [SPARKBASE, "--help"]),
            "sparkbase validate": partial(timed, [SPARKBASE, "validate", "--site", str(REPO)]),
        },
    )
    for size in args.sizes:
        site = make_site(work, size)
        lab = work / f"lab-{size}"
        lab_env = {**env, "SPARKBASE_LAB_DIR": str(lab)}
        up = Series(f"lab up ({size})")
        up.samples.append(
            timed(
                [
                    SPARKBASE,
                    "lab",
                    "up",
                    "--nodes",
                    str(size),
                    "--dir",
                    str(lab),
                    "--port-base",
                    str(args.port_base),
                ],
                lab_env,
            )
        )
        try:
            print(f"bench: converging {size} nodes", file=sys.stderr)
            converge = timed(
                [SPARKBASE, "apply", "--site", str(site), "--lab", str(lab), "--allow-reboot", "--yes"],
                lab_env,
            )
            hosts = ",".join(f"paramiko://spark{i + 1}" for i in range(size))
            pytest_plain = [
                str(VENV_BIN / "pytest"),
                "-q",
                "-p",
                "no:cacheprovider",
                str(REPO / "bench" / "plain_testinfra"),
                f"--hosts={hosts}",
                f"--ssh-config={lab / 'ssh_config'}",
                f"--sparkbase-site={site}",
            ]
            commands: dict[str, Callable[[], float]] = {
                "sparkbase audit": partial(
                    timed,
                    [
                        SPARKBASE,
                        "audit",
                        "--site",
                        str(site),
                        "--lab",
                        str(lab),
                        "--format",
                        "json",
                        "--output",
                        os.devnull,
                    ],
                    lab_env,
                ),
                "testinfra per assertion (serial)": partial(timed, pytest_plain, lab_env),
                "testinfra per assertion (xdist -n 4)": partial(timed, [*pytest_plain, "-n", "4"], lab_env),
            }
            if ansible is not None:
                inventory = ansible_inventory(lab, size, work / f"ansible-{size}.ini")
                ansible_env = {**lab_env, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_FORKS": "16"}
                commands["ansible -m setup"] = partial(
                    timed,
                    [str(ansible), "all", "-i", str(inventory), "-m", "setup", "-u", "root", "-o"],
                    ansible_env,
                )
            if size == 4:
                pyinfra_env = {**lab_env, "SPARKBASE_SITE": str(site)}
                commands["sparkbase preflight (4-node lane)"] = partial(
                    timed,
                    [SPARKBASE, "preflight", "dsv41-flash", "--site", str(site), "--lab", str(lab)],
                    lab_env,
                )
                commands["sparkbase apply (no-op)"] = partial(
                    timed, [SPARKBASE, "apply", "--site", str(site), "--lab", str(lab), "--yes"], lab_env
                )
                commands["pyinfra deploy (no-op, plain)"] = partial(
                    timed,
                    [
                        str(VENV_BIN / "pyinfra"),
                        "-y",
                        str(REPO / "deploys" / "inventory.py"),
                        str(REPO / "deploys" / "baseline.py"),
                    ],
                    pyinfra_env,
                )
            results[str(size)] = interleave(args.runs, commands)
            results[str(size)]["converge (apply --allow-reboot)"] = Series("converge", [converge])
            results[str(size)][up.name] = up
            if size == max(args.sizes):
                audit_argv = [SPARKBASE, "audit", "--site", str(site), "--lab", str(lab)]
                quiet = ["--format", "json", "--output", os.devnull]
                pools: dict[str, Callable[[], float]] = {
                    f"audit --parallel {p}": partial(
                        timed, [*audit_argv, "--parallel", str(p), *quiet], lab_env
                    )
                    for p in args.pools
                }
                results[f"pool-{size}"] = interleave(args.runs, pools)
        finally:
            down = Series(f"lab down ({size})")
            down.samples.append(timed([SPARKBASE, "lab", "down", "--dir", str(lab)], lab_env, ok=(0, 1)))
            results.setdefault(str(size), {})[down.name] = down
    write_report(results, fixed, args)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def write_report(
    results: dict[str, dict[str, Series]], fixed: dict[str, Series], args: argparse.Namespace
) -> None:
    """docs/benchmarks/README.md (table), results.json (raw samples), scaling.png (plot)."""
    OUT.mkdir(parents=True, exist_ok=True)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.platform()}"
    )
    lines = [
        "# sparkbase benchmarks",
        "",
        f"Run {when} on {machine}. Command: `.venv/bin/python bench/run.py "
        f"--sizes {' '.join(map(str, args.sizes))} --runs {args.runs}`.",
        "Medians of interleaved runs (min–max in brackets); ratios are of medians from the same run.",
        "",
        "| measurement | nodes | median s | spread s | runs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, s in fixed.items():
        lines.append(
            f"| {name} | – | {s.median:.3f} | {s.spread[0]:.3f}–{s.spread[1]:.3f} | {len(s.samples)} |"
        )
    for size, series in results.items():
        for name, s in series.items():
            lines.append(
                f"| {name} | {size} | {s.median:.3f} | {s.spread[0]:.3f}–{s.spread[1]:.3f} | {len(s.samples)}"
                + (f" ({s.failures} failed)" if s.failures else "")
                + " |"
            )
    lines += ["", "## Ratios", ""]
    for size, series in results.items():
        audit = series.get("sparkbase audit")
        if audit is None or not audit.samples:
            continue
        for other in (
            "testinfra per assertion (serial)",
            "testinfra per assertion (xdist -n 4)",
            "ansible -m setup",
        ):
            if other in series and series[other].samples:
                lines.append(
                    f"- {size} nodes: {other} / sparkbase audit = {series[other].median / audit.median:.1f}×"
                )
        noop, plain = series.get("sparkbase apply (no-op)"), series.get("pyinfra deploy (no-op, plain)")
        if noop and plain and noop.samples and plain.samples:
            lines.append(f"- {size} nodes: no-op apply / plain pyinfra = {noop.median / plain.median:.2f}×")
    audits = {
        int(k): v["sparkbase audit"].median
        for k, v in results.items()
        if k.isdigit() and "sparkbase audit" in v
    }
    if len(audits) > 1:
        smallest, largest = min(audits), max(audits)
        lines.append(
            f"- audit {largest} nodes / {smallest} nodes = {audits[largest] / audits[smallest]:.2f}×"
        )
    (OUT / "README.md").write_text("\n".join(lines) + "\n")
    raw = {
        "when": when,
        "machine": machine,
        "fixed": {k: v.samples for k, v in fixed.items()},
        "results": {size: {k: v.samples for k, v in s.items()} for size, s in results.items()},
    }
    (OUT / "results.json").write_text(json.dumps(raw, indent=2) + "\n")
    plot(results)


def plot(results: dict[str, dict[str, Series]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: matplotlib not installed; no plot", file=sys.stderr)
        return
    sizes = sorted(int(k) for k in results if k.isdigit())
    tools = [
        "sparkbase audit",
        "testinfra per assertion (serial)",
        "testinfra per assertion (xdist -n 4)",
        "ansible -m setup",
    ]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for tool in tools:
        points = [
            (n, results[str(n)][tool].median)
            for n in sizes
            if tool in results[str(n)] and results[str(n)][tool].samples
        ]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=tool)
    ax.set_xlabel("nodes")
    ax.set_ylabel("seconds (median)")
    ax.set_yscale("log")
    ax.set_title("Is the fleet right? Time against fleet size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "scaling.png", dpi=110)


if __name__ == "__main__":
    sys.exit(main())
