"""Which module answers which node command, imported only when the command runs.

As testinfra finds its modules by name in a registry, every node command names the
module (`cmd_<subsystem>.py`) whose `COMMANDS` table holds it; `main` imports just that
module, so a command costs only its own subsystem's imports. The wrappers in a node's
`/usr/local/bin`, the boot step (`shim.py __boot__`) and the node's command server
(`shim.py __shimd__`, which runs most commands: see shimd.py) all call `main`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

PACKAGE = "sparkbase_lab.shims"

#: command name -> module (in this package) whose COMMANDS table runs it
MODULES: dict[str, str] = {
    "uname": "cmd_kernel", "getconf": "cmd_kernel", "nproc": "cmd_kernel",
    "nvidia-smi": "cmd_gpu",
    "mokutil": "cmd_secureboot",
    "dkms": "cmd_modules", "modinfo": "cmd_modules", "modprobe": "cmd_modules",
    "insmod": "cmd_modules", "rmmod": "cmd_modules", "depmod": "cmd_modules",
    "lsmod": "cmd_modules", "update-initramfs": "cmd_kernel", "unmkinitramfs": "cmd_kernel",
    "fallocate": "cmd_swap", "mkswap": "cmd_swap", "swapon": "cmd_swap", "swapoff": "cmd_swap",
    "systemctl": "cmd_systemd",
    "update-grub": "cmd_grub", "update-grub2": "cmd_grub", "grub-mkconfig": "cmd_grub",
    "grub-reboot": "cmd_grub", "grub-set-default": "cmd_grub", "grub-editenv": "cmd_grub",
    "reboot": "cmd_power", "shutdown": "cmd_power", "poweroff": "cmd_power", "halt": "cmd_power",
    "netplan": "cmd_net", "ip": "cmd_net", "rdma": "cmd_net", "lspci": "cmd_net",
    "efibootmgr": "cmd_hw", "nvme": "cmd_hw", "cpupower": "cmd_hw",
    "__boot__": "boot_step", "__refresh__": "boot_step", "__serve__": "cmd_serving",
    "__worker__": "cmd_serving", "__shimd__": "shimd",
    "docker": "cmd_docker", "__container__": "cmd_docker", "__dockerd__": "cmd_docker",
}

#: internal entry points (run by node init), not commands in /usr/local/bin
INTERNAL = ("__boot__", "__refresh__", "__serve__", "__worker__", "__shimd__", "__container__", "__dockerd__")

#: what the node's command server (shimd.py) never runs: the power commands end the node
#: (every process, the server's included) and the internal entries must be processes of
#: their own (a lane's serving stand-in is found by its /proc/PID/cmdline); their
#: /usr/local/bin entries stay python wrappers
NOT_SERVED = ("reboot", "shutdown", "poweroff", "halt", *INTERNAL)

#: commands also shadowed in /usr/sbin: absolute paths must not reach the machine, and
#: maintainer scripts run by apt get PATH=/usr/sbin:/usr/bin:/sbin:/bin (no /usr/local),
#: so the tools a kernel's postinst calls live where Ubuntu has them
SBIN_SHADOWS = ("reboot", "shutdown", "poweroff", "halt", "swapon", "swapoff", "modprobe",
                "insmod", "rmmod", "depmod", "lsmod", "ip", "update-grub", "update-initramfs",
                "grub-mkconfig", "grub-reboot", "grub-set-default", "dkms")


#: commands a package installs elsewhere (linux-tools-<release>'s
#: /usr/lib/linux-tools/<release>/cpupower): never in /usr/local/bin, where they would
#: shadow the wrapper that decides whether they run
NOT_ON_PATH = ("cpupower",)


def commands() -> list[str]:
    """Every command a node has in /usr/local/bin."""
    return [name for name in MODULES if name not in INTERNAL and name not in NOT_ON_PATH]


def resolve(command: str) -> Callable[[list[str]], int]:
    """The function that runs `command` (imports its module)."""
    import importlib

    module = importlib.import_module(f"{PACKAGE}.{MODULES[command]}")
    table: dict[str, Callable[[list[str]], int]] = module.COMMANDS
    return table[command]


def main(command: str, argv: list[str]) -> int:
    """Run one node command; return its exit status."""
    from sparkbase_lab.shims.common import Fail

    if command not in MODULES:
        print(f"sparkbase lab: no such node command: {command}", file=sys.stderr)
        return 127
    try:
        return resolve(command)(argv)
    except Fail as exc:
        if str(exc):
            print(str(exc), file=sys.stderr)
        return exc.status
    except BrokenPipeError:
        return 141
