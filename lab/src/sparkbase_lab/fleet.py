"""The lab as a whole: bring N emulated Sparks up and down, report, reboot, reach them.

    lab = Lab("/tmp/mylab", port_base=2301)
    lab.up(4)                      # spark1..spark4 on 127.0.0.1:2301..2304
    rc, out, err = lab.run("spark1", "uname -r")
    lab.reboot("spark2")
    lab.down()                     # keeps node disks; lab.down(purge=True) wipes them

`up` starts a supervisor process (`sparkbase_lab.supervisor`) that is the parent of every
node, so each node is waited for; `down` stops it and checks every recorded PID is gone.
PIDs are recorded with their kernel start time and only ever signalled when both match.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkbase_lab import image, mok, packages, preload, procs, shimd_client

DEFAULT_DIR = "/var/lib/sparkbase/lab"
DEFAULT_PORT_BASE = 2201
DEFAULT_NODES = 4
ENV_DIR = "SPARKBASE_LAB_DIR"
ENV_BOOT_DELAY = "SPARKBASE_LAB_BOOT_DELAY"
#: seconds `Lab.run`'s shared connection to a node stays open with nothing using it: each
#: new OpenSSH connection costs ~0.12 s of client CPU (key exchange and auth), ~1,200 calls
#: a test run (docs/benchmarks/suite.md)
SHARED_IDLE_SECONDS = 60

#: what a clone copies of the lab directory (the client key, the MOK pair, the built apt
#: repository, preload library and node command client, and, of an as-found lab, its record
#: and the proxy's .env; ssh files are written by the clone's own `up`)
CLONED_LAB_PARTS = ("id_ed25519", "id_ed25519.pub", "mok", "apt", "preload", "shimd", "as-found.json",
                    "proxy.env")
#: what a clone copies of each node: its disk (overlay upper dir), firmware, host key
CLONED_NODE_PARTS = ("upper", "firmware", "ssh_host_ed25519_key", "ssh_host_ed25519_key.pub")

#: present in a lab directory while its node disks are as the site's fleet was found
#: (`sparkbase_lab.as_found`); wiping the disks removes it
AS_FOUND_RECORD = "as-found.json"
#: the model-name proxy's `.env` stand-in (sparkbase_lab.lanes.proxy_env)
PROXY_ENV = "proxy.env"

#: supervisors this process started, by lab dir: waited for on `down` (no zombies)
_SUPERVISORS: dict[str, subprocess.Popen[bytes]] = {}


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message says why and what to do."""


@dataclass
class NodeStatus:
    """One node as `lab status` reports it."""

    name: str
    port: int
    state: str
    """`up` (sshd greets), `unreachable` (no answer), `down` (not running)."""
    pid: int | None = None
    """Machine PID of the node's PID 1."""
    release: str | None = None
    page_size: int | None = None
    rss_kb: int = 0
    """Resident memory of every process of the node."""
    processes: int = 0
    faults: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The `lab status --json` form."""
        return asdict(self)


def default_dir() -> Path:
    """Lab directory: `$SPARKBASE_LAB_DIR`, else `/var/lib/sparkbase/lab`."""
    return Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)


def node_name(index: int) -> str:
    """Name of node `index` (1-based)."""
    return f"spark{index}"


class Lab:
    """One emulated fleet rooted at a directory."""

    def __init__(self, directory: str | os.PathLike[str] | None = None,
                 port_base: int | None = None) -> None:
        self.dir = Path(directory) if directory is not None else default_dir()
        self.dir = Path(os.path.abspath(self.dir))
        if re.search(r"[,:\s=]", str(self.dir)):
            raise LabError(f"lab dir {self.dir}: must not contain ',', ':', '=' or spaces")
        self._port_base = port_base

    # --- paths -----------------------------------------------------------------------

    @property
    def ssh_config_path(self) -> Path:
        """OpenSSH client config with one `Host sparkN` block per node."""
        return self.dir / "ssh_config"

    @property
    def control_dir(self) -> Path:
        """Where `run` keeps one shared OpenSSH connection per node (`ControlMaster`): under
        the temp dir, named by the lab dir's hash, so a socket path stays under the 108-byte
        limit however deep the lab dir is."""
        digest = hashlib.sha256(str(self.dir).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"sparkbase-lab-ssh-{digest}"

    @property
    def known_hosts_path(self) -> Path:
        """The nodes' host keys (never the user's ~/.ssh/known_hosts)."""
        return self.dir / "known_hosts"

    @property
    def key_path(self) -> Path:
        """The lab's private client key (root on every node)."""
        return self.dir / "id_ed25519"

    @property
    def mok_dir(self) -> Path:
        """The lab's own MOK key pair (`MOK.der`, `MOK.priv`), made when the lab is built."""
        return mok.key_dir(self.dir)

    @property
    def inventory_path(self) -> Path:
        """`inventory.yaml` describing the nodes."""
        return self.dir / "inventory.yaml"

    @property
    def state_path(self) -> Path:
        """`lab.json`: PIDs and ports while the lab is up."""
        return self.dir / "lab.json"

    @property
    def repo_path(self) -> Path:
        """The stand-in apt repository."""
        return self.dir / "apt"

    def node_dir(self, node: str) -> Path:
        """State directory of `node` (upper, work, firmware, log, host key)."""
        return self.dir / "nodes" / node

    @property
    def port_base(self) -> int:
        """Port of spark1 (sparkN listens on port_base + N - 1)."""
        if self._port_base is not None:
            return self._port_base
        state = self._state()
        return int(state["port_base"]) if state else DEFAULT_PORT_BASE

    @property
    def node_names(self) -> list[str]:
        """Names of the running nodes (of the last `up` when down)."""
        state = self._state()
        if state:
            return list(state["nodes"])
        plan = self._read_json(self.dir / "plan.json")
        if plan:
            return [n["name"] for n in plan["nodes"]]
        return [node_name(i) for i in range(1, DEFAULT_NODES + 1)]

    def port(self, node: str) -> int:
        """sshd port of `node`."""
        state = self._state()
        if state and node in state["nodes"]:
            return int(state["nodes"][node]["port"])
        match = re.fullmatch(r"spark(\d+)", node)
        if not match:
            raise LabError(f"unknown node {node!r}")
        return self.port_base + int(match.group(1)) - 1

    # --- state -----------------------------------------------------------------------

    @staticmethod
    def _read_json(path: Path) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data

    def _state(self) -> dict[str, Any] | None:
        return self._read_json(self.state_path)

    def _supervisor(self, state: dict[str, Any] | None) -> procs.Proc | None:
        if not state or not state.get("supervisor"):
            return None
        return procs.Proc.from_json(state["supervisor"])

    def is_up(self) -> bool:
        """Whether this lab's supervisor is running."""
        sup = self._supervisor(self._state())
        return sup is not None and procs.alive(sup)

    def _recorded(self, state: dict[str, Any]) -> list[procs.Proc]:
        out = []
        for node in state.get("nodes", {}).values():
            for key in ("init", "unshare"):
                if node.get(key):
                    out.append(procs.Proc.from_json(node[key]))
        return out

    def init_proc(self, node: str) -> procs.Proc:
        """PID 1 of `node` (machine PID), if the node runs."""
        state = self._state()
        if not state or node not in state["nodes"] or not state["nodes"][node].get("init"):
            raise LabError(f"{node} is not running (is the lab up? `sparkbase lab status`)")
        proc = procs.Proc.from_json(state["nodes"][node]["init"])
        if not procs.alive(proc):
            raise LabError(f"{node}'s init (PID {proc.pid}) is gone")
        return proc

    def node_pid(self, node: str) -> int:
        """Machine PID of `node`'s PID 1 (for `nsenter -t PID`)."""
        return self.init_proc(node).pid

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the lab's lock (one `lab up/down/reboot` at a time), waiting for it."""
        from filelock import UnixFileLock

        self.dir.mkdir(parents=True, exist_ok=True)
        with UnixFileLock(self.dir / ".lock", thread_local=False, fallback_to_soft=False):
            yield

    # --- up --------------------------------------------------------------------------

    def up(self, n: int = DEFAULT_NODES, fresh: bool = False, timeout: float = 60.0) -> bool:
        """Start `n` nodes; False (and nothing done) when already up with `n` nodes.

        Raises LabError when another configuration is up, a port already answers, or a node
        fails to start (the nodes already started are stopped first: never half up).
        `fresh` wipes the node disks first (factory-fresh nodes).
        """
        if n < 1:
            raise LabError("need at least one node")
        with self._locked():
            state = self._state()
            if state and self.is_up():
                names = list(state["nodes"])
                if len(names) == n and int(state["port_base"]) == self.port_base and not fresh:
                    return False
                raise LabError(
                    f"the lab in {self.dir} is already up with {len(names)} nodes on port base "
                    f"{state['port_base']}; run `sparkbase lab down` first"
                )
            if state:
                self._clean_stale(state)
            names = [node_name(i) for i in range(1, n + 1)]
            ports = [self.port_base + i for i in range(n)]
            for port in ports:
                if not 1024 <= port <= 65535:
                    raise LabError(f"port {port} out of range")
                if procs.port_answers(port):
                    raise LabError(
                        f"port {port} already answers on 127.0.0.1; choose another --port-base"
                    )
            if fresh:
                self._purge(names)
            self._prepare(names, ports)
            self._start_supervisor(names, ports, timeout)
            return True

    def _prepare(self, names: list[str], ports: list[int]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)  # noqa: S103 (a directory nodes' sshd must traverse)
        if not self.key_path.exists():
            _keygen(self.key_path, "sparkbase-lab client")
        try:
            mok.ensure_key_pair(self.dir)
        except mok.MokKeyError as exc:
            raise LabError(str(exc)) from exc
        packages.build_repo(self.repo_path)
        library = preload.build(self.dir / "preload")
        client = shimd_client.build(self.dir / "shimd")
        client_pub = self.key_path.with_suffix(".pub").read_text()
        boot_delay = float(os.environ.get(ENV_BOOT_DELAY, "1.0"))
        for index, (name, port) in enumerate(zip(names, ports, strict=True), 1):
            nd = self.node_dir(name)
            for sub in ("upper", "work", "merged", "firmware"):
                (nd / sub).mkdir(parents=True, exist_ok=True)
            host_key = nd / "ssh_host_ed25519_key"
            if not host_key.exists():
                _keygen(host_key, f"root@{name}")
            upper = nd / "upper"
            if not image.is_factory_built(upper):
                image.build_factory(upper, nd / "firmware", name)
            image.refresh(upper, name, index, port, host_key, client_pub, library, client)
            (nd / "node.json").write_text(json.dumps({
                "name": name, "index": index, "port": port, "labdir": str(self.dir),
                "apt": str(self.repo_path), "boot_delay": boot_delay,
            }, indent=1) + "\n")
        self._write_ssh_files(names, ports)

    def _write_ssh_files(self, names: list[str], ports: list[int]) -> None:
        from sparkbase_lab import ssh_files

        host_keys = {
            name: (self.node_dir(name) / "ssh_host_ed25519_key.pub").read_text()
            for name in names
        }
        ssh_files.write(self.dir, names, ports, host_keys, self.key_path)

    def _start_supervisor(self, names: list[str], ports: list[int], timeout: float) -> None:
        plan = {
            "port_base": self.port_base,
            "timeout": timeout,
            "nodes": [
                {"name": name, "dir": str(self.node_dir(name)), "port": port}
                for name, port in zip(names, ports, strict=True)
            ],
        }
        (self.dir / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
        with open(self.dir / "supervisor.log", "ab") as log:
            sup = subprocess.Popen(
                [sys.executable, "-m", "sparkbase_lab.supervisor", str(self.dir)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True, cwd="/",
            )
        assert sup.stdout is not None
        line = sup.stdout.readline().decode(errors="replace").strip()
        sup.stdout.close()
        if line != "READY":
            sup.wait(30)
            detail = line.removeprefix("ERROR: ") or _tail(self.dir / "supervisor.log")
            self.state_path.unlink(missing_ok=True)
            raise LabError(f"lab up failed (every node stopped again): {detail}")
        _SUPERVISORS[str(self.dir)] = sup

    def _clean_stale(self, state: dict[str, Any]) -> None:
        """A crashed lab: end what is left of our own PIDs, forget the state."""
        left = [p for p in self._recorded(state) if procs.alive(p)]
        sup = self._supervisor(state)
        if sup is not None:
            left.append(sup)
        procs.terminate([p for p in left if procs.alive(p)], grace=2.0)
        still = [p.pid for p in left if procs.alive(p)]
        if still:
            raise LabError(f"stale lab processes would not stop: PIDs {still}")
        self.state_path.unlink(missing_ok=True)

    # --- down ------------------------------------------------------------------------

    def down(self, purge: bool = False) -> bool:
        """Stop every node and the supervisor; False when nothing was running.

        Node disks are kept (the next `up` resumes the same nodes) unless `purge`.
        """
        with self._locked():
            self.close_shared_connections()
            state = self._state()
            was_up = False
            if state:
                sup = self._supervisor(state)
                recorded = self._recorded(state)
                was_up = any(procs.alive(p) for p in [*recorded, *([sup] if sup else [])])
                if sup is not None:
                    procs.kill(sup, signal.SIGTERM)
                    popen = _SUPERVISORS.pop(str(self.dir), None)
                    if popen is not None:
                        try:
                            popen.wait(20)
                        except subprocess.TimeoutExpired:
                            procs.kill(sup, signal.SIGKILL)
                            popen.wait(5)
                    else:
                        procs.wait_gone([sup], 20)
                survivors = [p for p in recorded if procs.alive(p)]
                if survivors:
                    procs.terminate(survivors, grace=2.0)
                stuck = [p.pid for p in [*recorded, *([sup] if sup else [])] if procs.alive(p)]
                if stuck:
                    raise LabError(f"lab processes would not stop: PIDs {stuck}")
                self.state_path.unlink(missing_ok=True)
            stale = self.mounts()
            for target in reversed(stale):
                subprocess.run(["umount", "-l", target], check=False)
            if purge:
                self._purge(self.node_names)
            return was_up

    def _purge(self, names: list[str]) -> None:
        """Wipe the nodes' disks and the lab's own state of them: the as-found record and the
        proxy's `.env` stand-in (a factory-fresh fleet serves nothing through a proxy yet)."""
        (self.dir / AS_FOUND_RECORD).unlink(missing_ok=True)
        (self.dir / PROXY_ENV).unlink(missing_ok=True)
        for name in names:
            nd = self.node_dir(name)
            for sub in ("upper", "work", "merged", "firmware"):
                shutil.rmtree(nd / sub, ignore_errors=True)
            (nd / "log").unlink(missing_ok=True)

    # --- clone -----------------------------------------------------------------------

    def clone(self, directory: str | os.PathLike[str], port_base: int, nodes: int | None = None) -> Lab:
        """A new lab in `directory` whose nodes start from copies of this lab's node disks.

        This lab must be down (a running node's disk changes under the copy). The clone
        gets its own copy of each node's disk, firmware and host key, and of the lab's
        client key, MOK pair, apt repository and preload library, so nothing a test does to
        the clone reaches this lab; `up` then writes its ssh files for its own ports. Copies
        keep sparse files sparse and the overlay's xattrs (`cp -a --sparse=always`, reflinks
        where the file system has them). `nodes`: how many of the first nodes (default all).
        """
        target = Lab(directory, port_base=port_base)
        if self.is_up():
            raise LabError(f"the lab in {self.dir} is up; clone a lab that is down")
        if target.dir.exists() and any(target.dir.iterdir()):
            raise LabError(f"{target.dir} is not empty; a clone needs a new directory")
        names = self.node_names[:nodes] if nodes is not None else self.node_names
        missing = [name for name in names if not image.is_factory_built(self.node_dir(name) / "upper")]
        if missing or not names:
            raise LabError(f"the lab in {self.dir} has no disk for {', '.join(missing) or 'any node'}")
        target.dir.mkdir(parents=True, exist_ok=True)
        for part in CLONED_LAB_PARTS:
            if (self.dir / part).exists():
                _copy_tree(self.dir / part, target.dir / part)
        for name in names:
            target.node_dir(name).mkdir(parents=True)
            for part in CLONED_NODE_PARTS:
                _copy_tree(self.node_dir(name) / part, target.node_dir(name) / part)
        plan = {"nodes": [{"name": name} for name in names]}
        (target.dir / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
        return target

    def mounts(self) -> list[str]:
        """Mount points in the machine's mount table under the lab dir (should be none)."""
        prefix = str(self.dir) + "/"
        out = []
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                target = line.split()[4].replace("\\040", " ")
                if target.startswith(prefix) or target == str(self.dir):
                    out.append(target)
        return out

    # --- status, reboot, run -----------------------------------------------------------

    def status(self) -> list[NodeStatus]:
        """Every node of the lab and how it is."""
        state = self._state()
        out: list[NodeStatus] = []
        if not state:
            return [NodeStatus(name, self.port(name), "down") for name in self.node_names]
        for name, entry in state["nodes"].items():
            port = int(entry["port"])
            ns = NodeStatus(name, port, "down")
            init = procs.Proc.from_json(entry["init"]) if entry.get("init") else None
            if init is not None and procs.alive(init):
                ns.pid = init.pid
                family = [init.pid, *procs.descendants(init.pid)]
                ns.processes = len(family)
                ns.rss_kb = sum(procs.rss_kb(p) for p in family)
                ns.state = "up" if procs.ssh_banner(port, 1.0) else "unreachable"
                root = Path(f"/proc/{init.pid}/root")
                boot_state = self._read_json(root / "run/sparkbase-lab/state.json") or {}
                ns.release = boot_state.get("release")
                ns.page_size = boot_state.get("page_size")
                ns.faults = self._read_json(self.node_dir(name) / "firmware/faults.json") or {}
            out.append(ns)
        return out

    def booted_at(self, node: str) -> float:
        """When `node` last finished its boot step (0 while it boots)."""
        init = self.init_proc(node)
        data = self._read_json(Path(f"/proc/{init.pid}/root/run/sparkbase-lab/state.json"))
        return float(data.get("booted_at", 0)) if data else 0.0

    def reboot(self, node: str, wait: bool = True, timeout: float = 60.0) -> None:
        """Reboot `node` (as its `reboot` command does); with `wait`, until sshd is back."""
        init = self.init_proc(node)
        before = self.booted_at(node)
        os.kill(init.pid, signal.SIGHUP)
        if wait:
            self.wait_booted(node, after=before, timeout=timeout)

    def wait_booted(self, node: str, after: float, timeout: float = 60.0) -> None:
        """Wait until `node` has booted later than `after` and its sshd greets."""
        deadline = time.monotonic() + timeout
        port = self.port(node)
        while time.monotonic() < deadline:
            with contextlib.suppress(LabError):
                if self.booted_at(node) > after and procs.ssh_banner(port, 0.5):
                    return
            time.sleep(0.05)
        raise LabError(f"{node} did not come back within {timeout:.0f}s")

    def add_sudo_user(self, user: str, nodes: Sequence[str] | None = None) -> None:
        """Give every node (or `nodes`) a login `user` with the lab client key and
        passwordless sudo, as a site whose inventory says `ssh.user: USER, ssh.sudo: true`
        has. Kept on the node's disk (survives reboots); idempotent."""
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user) or user == "root":
            raise LabError(f"not a plain user name: {user!r}")
        script = (
            f"id -u {user} >/dev/null 2>&1 || useradd -m -s /bin/sh {user}; "
            # no password at all ('*'), not a locked one ('!'): sshd without PAM refuses locked users
            f"usermod -p '*' {user}; "
            f"install -d -m 700 -o {user} -g {user} /home/{user}/.ssh; "
            f"install -m 600 -o {user} -g {user} /root/.ssh/authorized_keys "
            f"/home/{user}/.ssh/authorized_keys; "
            f"printf '%s\\n' '{user} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/90-lab-{user}; "
            f"chmod 440 /etc/sudoers.d/90-lab-{user}; command -v sudo >/dev/null"
        )
        for node in nodes or self.node_names:
            status, _out, err = self.run(node, script)
            if status != 0:
                raise LabError(f"{node}: could not add user {user} (is sudo installed? "
                               f"scripts/bootstrap installs it): {err.strip()}")

    def ssh_argv(self, node: str, command: Sequence[str] = (), tty: bool = False,
                 shared: bool = False) -> list[str]:
        """OpenSSH command line reaching `node` through the lab's ssh_config; `shared`: over
        the node's one shared connection (`run`), else a login of its own."""
        argv = ["ssh", "-F", str(self.ssh_config_path)]
        if shared:
            self.control_dir.mkdir(mode=0o700, exist_ok=True)
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_dir}/%r@%n",
                     "-o", f"ControlPersist={SHARED_IDLE_SECONDS}"]
        if tty:
            argv.append("-t")
        return [*argv, node, *(["--", *command] if command else [])]

    def run(self, node: str, command: str | Sequence[str], timeout: float = 120.0,
            input: str | None = None) -> tuple[int, str, str]:
        """Run `command` on `node` over SSH: (exit status, stdout, stderr).

        A string is a shell command line; a sequence is quoted argument by argument.
        """
        line = command if isinstance(command, str) else shlex.join(command)
        result = subprocess.run(
            [*self.ssh_argv(node, shared=True), line], capture_output=True, text=True,
            timeout=timeout, input=input, check=False,
        )
        return result.returncode, result.stdout, result.stderr

    def close_shared_connections(self, node: str | None = None) -> None:
        """Ask `run`'s shared connections (to `node`, or all and their directory) to exit
        (`ssh -O exit`): the next `run` logs in afresh. A node's reboot or `down` ends its
        connection anyway; an idle one exits by itself after `SHARED_IDLE_SECONDS`."""
        if not self.control_dir.is_dir():
            return
        for socket in self.control_dir.glob(f"*@{node}" if node else "*"):
            subprocess.run(["ssh", "-F", "none", "-o", f"ControlPath={socket}", "-O", "exit", "lab-node"],
                           capture_output=True, timeout=10, check=False)
        if node is None:
            shutil.rmtree(self.control_dir, ignore_errors=True)


def _keygen(path: Path, comment: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, stdin=subprocess.DEVNULL,
    )


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a file or directory tree with owners, modes, times, xattrs, device nodes (the
    overlay's whiteouts) and holes kept; reflinked where the file system can."""
    result = subprocess.run(
        ["cp", "-a", "--reflink=auto", "--sparse=always", "--", str(source), str(target)],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise LabError(f"could not copy {source} to {target}: {result.stderr.strip()}")


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "no details"
