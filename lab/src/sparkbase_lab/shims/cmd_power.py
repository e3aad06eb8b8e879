"""`reboot`, `shutdown`, `poweroff`, `halt`: a node reboots (init restarts it); it never powers off."""

from __future__ import annotations

import os
import sys

from sparkbase_lab.shims.common import Fail

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable


def cmd_reboot(argv: list[str]) -> int:
    """Ask the node's init (PID 1) to reboot the node."""
    import signal

    sys.stdout.flush()
    os.kill(1, signal.SIGHUP)
    return 0


def cmd_shutdown(argv: list[str]) -> int:
    """`shutdown -r` reboots, `-c` cancels; anything else would power off (refused)."""
    if "-r" in argv or "--reboot" in argv:
        return cmd_reboot([])
    if "-c" in argv:
        return 0
    return cmd_poweroff([])


def cmd_poweroff(argv: list[str]) -> int:
    """Refused: a lab node is stopped with `sparkbase lab down`."""
    raise Fail("the sparkbase lab cannot power a node off; use `sparkbase lab down`", 1)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "reboot": cmd_reboot, "shutdown": cmd_shutdown, "poweroff": cmd_poweroff, "halt": cmd_poweroff,
}
