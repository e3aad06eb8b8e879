"""PID 1 of an emulated node: build its root, boot it, run sshd, reboot on request.

Run as `python -m sparkbase_lab.node_init NODE_DIR` by
`setsid unshare --mount --uts --pid --fork --kill-child --propagation private`.
`NODE_DIR/node.json` names the node, its port and the lab directory.

Signals (from inside the node's PID namespace or from the lab):
- SIGHUP: reboot (every other process ends, about a second down, boot again, sshd back);
- SIGUSR1: re-read the node's `faults.json` (stop/start/freeze sshd, refresh hardware);
- SIGTERM/SIGINT: shut down (PID 1 exits; the kernel tears the namespaces down).

After `pivot_root` the machine's file system is gone from view, including this
interpreter's standard library when it lives under `/root`; every module init needs is
imported at the top.
"""

from __future__ import annotations

import contextlib
import encodings.idna
import encodings.latin_1
import encodings.utf_8  # noqa: F401
import errno
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from sparkbase_lab import _sys

SHIM_LIB = "/usr/local/lib/sparkbase-lab"
#: the node's view of its firmware dir on the machine (faults.json in, faults.applied out)
FIRMWARE = "/run/sparkbase-lab/firmware"
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROC_FILES = ("cmdline", "cpuinfo", "modules")


class Init:
    """The state of one node's PID 1."""

    def __init__(self, node_dir: Path) -> None:
        self.node_dir = node_dir
        self.cfg: dict[str, Any] = json.loads((node_dir / "node.json").read_text())
        self.log = open(node_dir / "log", "a", buffering=1)  # noqa: SIM115 (lives as long as init)
        self.sshd: subprocess.Popen[bytes] | None = None
        self.shimd: subprocess.Popen[bytes] | None = None
        self.bound: list[str] = []
        self.flags: set[str] = set()
        self.wake_r, self.wake_w = os.pipe()
        self.faults: dict[str, Any] = {}
        self.boot_time = time.monotonic()

    def say(self, message: str) -> None:
        """Append a line to the node's log (outside the node)."""
        self.log.write(f"{time.strftime('%H:%M:%S')} init[{self.cfg['name']}]: {message}\n")

    # --- building the root -----------------------------------------------------------

    def build_root(self) -> None:
        """Mount the node's file systems and pivot into them."""
        socket.sethostname(self.cfg["name"])
        merged = self.node_dir / "merged"
        upper, work = self.node_dir / "upper", self.node_dir / "work"
        m = str(merged)
        _sys.mount("none", "/", None, _sys.MS_REC | _sys.MS_PRIVATE)
        _sys.mount("overlay", m, "overlay", 0, f"lowerdir=/,upperdir={upper},workdir={work}")
        _sys.mount("proc", f"{m}/proc", "proc", _sys.MS_NOSUID | _sys.MS_NODEV)
        _sys.mount(f"{m}/proc/sys", f"{m}/proc/sys", None, _sys.MS_BIND)
        _sys.mount(
            f"{m}/proc/sys", f"{m}/proc/sys", None, _sys.MS_BIND | _sys.MS_REMOUNT | _sys.MS_RDONLY
        )
        _sys.mount("/dev", f"{m}/dev", None, _sys.MS_BIND | _sys.MS_REC)
        _sys.mount("shm", f"{m}/dev/shm", "tmpfs", _sys.MS_NOSUID | _sys.MS_NODEV, "mode=1777")
        apt = f"{m}/srv/sparkbase-lab/apt"
        os.makedirs(apt, exist_ok=True)
        _sys.mount(self.cfg["apt"], apt, None, _sys.MS_BIND)
        _sys.mount(self.cfg["apt"], apt, None, _sys.MS_BIND | _sys.MS_REMOUNT | _sys.MS_RDONLY)
        labdir = os.path.realpath(self.cfg["labdir"])
        hidden = f"{m}{labdir}"
        if not (labdir + "/").startswith("/tmp/") and os.path.isdir(hidden):
            _sys.mount("lab", hidden, "tmpfs", _sys.MS_RDONLY, "size=4k,mode=755")
        flags = _sys.MS_NOSUID | _sys.MS_NODEV
        _sys.mount("tmpfs", f"{m}/run", "tmpfs", flags, "mode=755,size=64m")
        os.makedirs(f"{m}{FIRMWARE}", exist_ok=True)
        _sys.mount(str(self.node_dir / "firmware"), f"{m}{FIRMWARE}", None,
                   _sys.MS_BIND)
        os.chdir(m)
        _sys.pivot_root(".", ".")
        _sys.umount(".")
        os.chdir("/")
        self.mount_volatile()

    def mount_volatile(self) -> None:
        """Fresh /run, /tmp and /sys (what a reboot loses).

        /run stays mounted across reboots (its firmware bind comes from the machine, which
        is out of view after pivot_root); a reboot empties it instead.
        """
        flags = _sys.MS_NOSUID | _sys.MS_NODEV
        _sys.mount("tmpfs", "/tmp", "tmpfs", flags, "mode=1777")
        _sys.mount("sysfs", "/sys", "tmpfs", flags, "mode=755,size=16m")
        for d in ("/run/sshd", "/run/lock"):
            os.makedirs(d, exist_ok=True)
        os.chmod("/run/sshd", 0o755)  # noqa: S103 (sshd's privilege-separation dir)

    def unmount_volatile(self) -> None:
        """Undo `mount_volatile` and the per-boot /proc binds; empty /run."""
        for target in reversed(self.bound):
            with contextlib.suppress(OSError):
                _sys.umount(target)
        self.bound = []
        for target in ("/tmp", "/sys"):
            with contextlib.suppress(OSError):
                _sys.umount(target)
        self._empty("/run", keep={FIRMWARE})

    def _empty(self, top: str, keep: set[str]) -> None:
        """Delete everything under `top` except the paths in `keep` (mount points)."""
        for entry in os.scandir(top):
            if entry.path in keep:
                continue
            if entry.is_dir(follow_symlinks=False):
                if any(k.startswith(entry.path + "/") for k in keep):
                    self._empty(entry.path, keep)
                    continue
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)

    # --- boot ------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Environment for processes init starts inside the node."""
        return {"PATH": NODE_PATH, "LANG": "C.UTF-8", "HOME": "/root"}

    def boot(self) -> None:
        """Run the boot step, bind its outputs over /proc, start sshd."""
        started = time.monotonic()
        result = subprocess.run(
            ["/usr/bin/python3", "-IS", f"{SHIM_LIB}/shim.py", "__boot__"],
            capture_output=True, text=True, env=self.env(), cwd="/", check=False,
        )
        if result.stderr:
            self.say(f"boot step stderr: {result.stderr.strip()}")
        if result.returncode != 0:
            raise RuntimeError(f"boot step failed with status {result.returncode}")
        keys: list[str] = json.loads(result.stdout.strip().splitlines()[-1])["sysctls"]
        self.start_shimd()
        self.boot_time = time.monotonic()
        self.write_uptime()
        for name in ("cmdline", "cpuinfo", "modules", "swaps", "uptime"):
            if os.path.exists(f"/proc/{name}"):
                self.bind(f"/run/sparkbase-lab/proc/{name}", f"/proc/{name}")
            # A kernel built without module support has no /proc/modules (procfs cannot
            # gain files): `lsmod` and /sys/module/<name> still report the node's modules.
        for key in keys:
            self.bind(f"/run/sparkbase-lab/sysctl/{key}", "/proc/sys/" + key.replace(".", "/"))
        self.start_containers()
        self.read_faults()
        self.start_sshd()
        self.say(f"booted in {time.monotonic() - started:.2f}s")

    def start_containers(self) -> None:
        """What dockerd does when it starts: containers whose restart policy says so run
        again (shims/cmd_docker.py); nothing when the node has never run one."""
        if not os.path.isdir("/var/lib/sparkbase-lab/docker/containers"):
            return
        subprocess.run(
            ["/usr/bin/python3", "-IS", f"{SHIM_LIB}/shim.py", "__dockerd__"],
            env=self.env(), cwd="/", check=False, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
        )

    def write_uptime(self) -> None:
        """`/proc/uptime` counts from this node's last boot (pyinfra's reboot checks it)."""
        up = time.monotonic() - self.boot_time
        with contextlib.suppress(OSError), open("/run/sparkbase-lab/proc/uptime", "w") as fh:
            fh.write(f"{up:.2f} {up * 18:.2f}\n")

    def bind(self, source: str, target: str) -> None:
        """Bind-mount one file, remembering it for the next reboot."""
        _sys.mount(source, target, None, _sys.MS_BIND)
        self.bound.append(target)

    def read_faults(self) -> str:
        """Load `faults.json` (written by `sparkbase_lab.faults`); its text as read."""
        try:
            text = Path(f"{FIRMWARE}/faults.json").read_text()
            self.faults = json.loads(text)
        except (OSError, ValueError):
            text, self.faults = "", {}
        return text

    def start_shimd(self) -> None:
        """Start the node's command server (shims/shimd.py) unless it runs. The node's
        commands ask it and run themselves while it is not up, so nobody waits for it."""
        if self.shimd is None or self.shimd.poll() is not None:
            self.shimd = subprocess.Popen(
                ["/usr/bin/python3", "-IS", f"{SHIM_LIB}/shim.py", "__shimd__"],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=self.env(),
                cwd="/", start_new_session=True,
            )

    def start_sshd(self) -> None:
        """Start sshd unless the node is faulted unreachable; freeze it for `hang`."""
        if self.faults.get("unreachable"):
            self.say("fault unreachable: sshd not started")
            return
        if self.sshd is None or self.sshd.poll() is not None:
            self.sshd = subprocess.Popen(
                ["/usr/sbin/sshd", "-D", "-e", "-f", "/etc/ssh/sshd_config"],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=self.env(),
                cwd="/", start_new_session=True,
            )
        if self.faults.get("hang"):
            os.kill(self.sshd.pid, signal.SIGSTOP)

    def apply_faults(self) -> None:
        """SIGUSR1: bring sshd and the emulated hardware in line with `faults.json`; then
        say which text was applied (`faults.applied`: `faults.inject` waits for it)."""
        text = self.read_faults()
        if self.faults.get("unreachable"):
            self.kill_all()
            self.sshd = self.shimd = None
        else:
            self.start_shimd()
            if self.sshd is not None and self.sshd.poll() is None:
                os.kill(self.sshd.pid, signal.SIGCONT)
            self.start_sshd()
        subprocess.run(
            ["/usr/bin/python3", "-IS", f"{SHIM_LIB}/shim.py", "__refresh__"],
            env=self.env(), cwd="/", check=False, stdout=self.log, stderr=self.log,
        )
        with contextlib.suppress(OSError):
            Path(f"{FIRMWARE}/faults.applied.tmp").write_text(text)
            os.replace(f"{FIRMWARE}/faults.applied.tmp", f"{FIRMWARE}/faults.applied")

    # --- processes -------------------------------------------------------------------

    def reap(self) -> None:
        """Collect every exited child (PID 1 adopts the namespace's orphans)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for child in (self.sshd, self.shimd):
                if child is not None and pid == child.pid:
                    child.returncode = -1

    def others(self) -> list[int]:
        """PIDs of every process in the node except init."""
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]

    def kill_all(self) -> None:
        """SIGKILL every other process in the node and reap them."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            pids = self.others()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
            self.reap()
        self.say(f"processes survived SIGKILL: {self.others()}")

    def reboot(self) -> None:
        """Restart the node: processes end, volatile state goes, boot again."""
        self.say("reboot requested")
        time.sleep(0.2)  # let the `reboot` command's exit status reach its SSH client
        self.kill_all()
        self.sshd = self.shimd = None
        self.unmount_volatile()
        time.sleep(float(self.cfg.get("boot_delay", 1.0)))
        self.mount_volatile()
        self.boot()

    # --- main loop -------------------------------------------------------------------

    def on_signal(self, signum: int, _frame: object) -> None:
        """Record a signal and wake the main loop."""
        self.flags.add(signal.Signals(signum).name)
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"x")

    def run(self) -> int:
        """Build, boot, then serve signals until told to stop."""
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGCHLD):
            signal.signal(sig, self.on_signal)
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        self.build_root()
        self.boot()
        while True:
            with contextlib.suppress(InterruptedError):
                select.select([self.wake_r], [], [], 1.0)
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake_r, 4096)
            self.write_uptime()
            flags, self.flags = self.flags, set()
            self.reap()
            if flags & {"SIGTERM", "SIGINT"}:
                self.say("shutting down")
                self.kill_all()
                return 0
            if "SIGHUP" in flags:
                self.reboot()
            if "SIGUSR1" in flags:
                self.apply_faults()


def main(argv: list[str]) -> int:
    """Entry point: `python -m sparkbase_lab.node_init NODE_DIR`."""
    if os.getpid() != 1:
        print("node_init must run as PID 1 of a new PID namespace", file=sys.stderr)
        return 2
    init = Init(Path(argv[0]))
    try:
        return init.run()
    except Exception as exc:
        init.say(f"fatal: {exc!r}\n{traceback.format_exc()}")
        if isinstance(exc, OSError) and exc.errno == errno.EPERM:
            return 77
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
