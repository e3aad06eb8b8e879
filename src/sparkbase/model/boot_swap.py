"""The boot unit and script sparkbase renders for `memory.swap_by_page_size`.

A swap header is written for one page size, so a kernel of another page size refuses the
file. The recipe's answer (spark-ds41f host/kernel-memory/spark3-kernel-memory and its
service, db98392f) is a oneshot unit before `swap.target` that swaps on the file made for
`getconf PAGESIZE`; sparkbase renders its own. Names only: read by the model, the render,
the deploy, the fact plan and the audit (which must not load the typed model).
"""

from __future__ import annotations

#: the unit (oneshot, before swap.target, wanted by swap.target)
BOOT_SWAP_UNIT = "sparkbase-swap.service"
#: where it lives (sparkbase writes it whole, with its ownership record)
BOOT_SWAP_UNIT_FILE = f"/etc/systemd/system/{BOOT_SWAP_UNIT}"
#: the script it runs
BOOT_SWAP_SCRIPT = "/usr/local/sbin/sparkbase-swap"
