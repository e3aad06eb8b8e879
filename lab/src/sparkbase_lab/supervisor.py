"""The lab supervisor: parent of every node, so nodes are waited for (no zombies).

`python -m sparkbase_lab.supervisor LABDIR` reads `LABDIR/plan.json`, starts one
`unshare ... node_init` per node, waits until every node's sshd greets, writes
`LABDIR/lab.json` and prints `READY` (or `ERROR: reason`, after stopping every node it
started, and exits 1). It then waits on its children until SIGTERM, when it stops the
nodes (SIGTERM to each node's PID 1, SIGKILL to `unshare` after a grace period) and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sparkbase.atomicfile import write_atomic
from sparkbase_lab import procs

UNSHARE = ["unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child",
           "--propagation", "private"]
STATE_FORMAT = 1


class Node:
    """One running node as the supervisor sees it."""

    def __init__(self, name: str, node_dir: str, port: int) -> None:
        self.name = name
        self.dir = node_dir
        self.port = port
        self.popen: subprocess.Popen[bytes] | None = None
        self.unshare: procs.Proc | None = None
        self.init: procs.Proc | None = None

    def start(self) -> None:
        """Start `unshare` (new session) running node init as PID 1."""
        log = open(Path(self.dir) / "log", "ab")  # noqa: SIM115 (handed to the child)
        self.popen = subprocess.Popen(
            [*UNSHARE, sys.executable, "-m", "sparkbase_lab.node_init", self.dir],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            cwd="/",
        )
        log.close()
        self.unshare = procs.Proc.of(self.popen.pid)

    def find_init(self) -> procs.Proc | None:
        """PID 1 of the node, as a machine PID."""
        if self.init is None and self.popen is not None:
            kids = procs.children(self.popen.pid)
            if kids:
                self.init = procs.Proc.of(kids[0])
        return self.init

    def failed(self) -> str | None:
        """Why the node is gone, or None while it runs."""
        if self.popen is None:
            return "not started"
        code = self.popen.poll()
        if code is None:
            return None
        tail = ""
        with contextlib.suppress(OSError):
            lines = (Path(self.dir) / "log").read_text(errors="replace").splitlines()
            tail = " | ".join(line for line in lines[-6:] if line.strip())
        return f"node exited with status {code}: {tail}"

    def to_json(self) -> dict[str, Any]:
        """This node's entry in `lab.json`."""
        return {
            "port": self.port,
            "dir": self.dir,
            "unshare": self.unshare.to_json() if self.unshare else None,
            "init": self.init.to_json() if self.init else None,
        }


class Supervisor:
    """Starts, watches and stops every node of one lab."""

    def __init__(self, labdir: Path) -> None:
        self.labdir = labdir
        plan = json.loads((labdir / "plan.json").read_text())
        self.plan = plan
        self.nodes = [Node(n["name"], n["dir"], int(n["port"])) for n in plan["nodes"]]
        self.stop_requested = False

    def on_stop(self, _signum: int, _frame: object) -> None:
        """SIGTERM/SIGINT: stop the lab."""
        self.stop_requested = True

    def write_state(self) -> None:
        """Record PIDs and ports atomically in `lab.json`."""
        me = procs.Proc.of(os.getpid())
        data = {
            "format": STATE_FORMAT,
            "supervisor": me.to_json() if me else None,
            "port_base": self.plan["port_base"],
            "started_at": time.time(),
            "nodes": {n.name: n.to_json() for n in self.nodes},
        }
        write_atomic(self.labdir / "lab.json", json.dumps(data, indent=1) + "\n")

    def start_all(self) -> str | None:
        """Start every node and wait for sshd on each; the failure reason, or None."""
        for node in self.nodes:
            if procs.port_answers(node.port):
                return f"port {node.port} (for {node.name}) already answers on 127.0.0.1"
            node.start()
        deadline = time.monotonic() + float(self.plan.get("timeout", 60))
        waiting = list(self.nodes)
        while waiting:
            if self.stop_requested:
                return "interrupted"
            for node in list(waiting):
                node.find_init()
                why = node.failed()
                if why:
                    return f"{node.name} failed to start: {why}"
                if node.init is not None and procs.ssh_banner(node.port, 0.5):
                    waiting.remove(node)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(n.name for n in waiting)
                return f"timed out waiting for sshd on {names}"
            if waiting:
                time.sleep(0.05)
        return None

    def stop_all(self) -> None:
        """Stop every node: SIGTERM to PID 1, then SIGKILL `unshare` (kills the namespace)."""
        for node in self.nodes:
            if node.find_init() is not None:
                procs.kill(node.init, signal.SIGTERM)  # type: ignore[arg-type]
        deadline = time.monotonic() + 5
        for node in self.nodes:
            if node.popen is None:
                continue
            try:
                node.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.popen.kill()
                node.popen.wait(5)
        for node in self.nodes:
            if node.init is not None and procs.alive(node.init):
                procs.kill(node.init, signal.SIGKILL)

    def run(self) -> int:
        """Bring the lab up, report, serve until stopped."""
        signal.signal(signal.SIGTERM, self.on_stop)
        signal.signal(signal.SIGINT, self.on_stop)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        reason = self.start_all()
        if reason:
            self.stop_all()
            print(f"ERROR: {reason}", flush=True)
            return 1
        self.write_state()
        print("READY", flush=True)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)
        while not self.stop_requested:
            time.sleep(0.2)
            for node in self.nodes:
                if node.popen is not None:
                    node.popen.poll()  # reap a node that died on its own
        self.stop_all()
        return 0


def main(argv: list[str]) -> int:
    """Entry point: `python -m sparkbase_lab.supervisor LABDIR`."""
    return Supervisor(Path(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
