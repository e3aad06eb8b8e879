"""DGX OS's own tuning units that a baseline drives, and the values they set.

sparkbase does not write these units: DGX OS ships them, and a baseline only decides
whether they run. Every value here has a public source (docs/sources/ds41f-research.md).
"""

from __future__ import annotations

#: DGX OS's governor unit (package nv-cpu-governor): `Type=idle`,
#: `ExecStart=/usr/bin/cpupower frequency-set -g performance`. `/usr/bin/cpupower` is
#: Ubuntu's linux-tools wrapper: it runs `/usr/lib/linux-tools/$(uname -r)/cpupower` and
#: fails (exit 2) without `linux-tools-<running kernel>` (spark-ds41f
#: experiments/2026-10-02-kernel-64k/boot-test/README.md, 0e3b624e: "`nv-cpu-governor`
#: initially failed because the matching `linux-tools` package was missing")
GOVERNOR_UNIT = "nv-cpu-governor.service"
#: the package stem of the per-kernel cpupower binary (`linux-tools-<release>`)
TOOLS_PACKAGE_STEM = "linux-tools"

#: DGX OS's NVMe coalescing unit (package nvidia-nvme-options): runs
#: NVME_COALESCING_SCRIPT `enable` at every boot, which sets NVMe feature 0x08 to 0x107
#: (spark-ds41f experiments/2026-10-02-nvme-coalescing/README.md, 3df77d2e)
NVME_COALESCING_UNIT = "nvidia-nvme-interrupt-coalescing.service"
#: the script the unit runs; `disable` writes 0 now (spark-ds41f docs/setup.md, cff464c6)
NVME_COALESCING_SCRIPT = "/usr/bin/nvidia-nvme-interrupt-coalescing.sh"
#: NVMe feature id of Interrupt Coalescing
NVME_COALESCING_FEATURE = 0x08
#: the value DGX OS sets: one interrupt per 8 completions (THR 7, 0-based) or after 100 µs
NVME_COALESCING_ON = 0x107
#: the NVMe reset value: coalescing off
NVME_COALESCING_OFF = 0
#: the controller the recipe reads and sets (`nvme get-feature /dev/nvme0 -f 8`)
NVME_DEVICE = "/dev/nvme0"


def coalescing_value(on: bool) -> int:
    """Feature 0x08 as a baseline's `host.nvme.interrupt_coalescing` wants it."""
    return NVME_COALESCING_ON if on else NVME_COALESCING_OFF
