"""`nvidia-smi`: the GB10 as the running driver sees it (idle, busy or latched: faults)."""

from __future__ import annotations

from sparkbase_lab.shims.common import Fail, LazyModule, faults, node_info, read_text, state

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkbase_lab import boot as B
else:
    B = LazyModule("sparkbase_lab.boot")


def _utils_version() -> str | None:
    """The user-space driver version (nvidia-utils), None when not installed."""
    text = read_text("/usr/share/sparkbase-lab/nvidia-utils.version").strip()
    return text or None


#: (clocks.sm, power.draw, utilization.gpu, clocks_event_reasons.active, pstate) per state.
#: idle: no work, clocked down with NVML's GPU-idle reason (P8, a few watts: the real GB10
#: summary table shows P8 at 4 W); busy: serving at speed; latched: the site's latch under
#: load (555-656 MHz, 9-11 W, no reason reported). The clocks are the lab's, not measured.
GPU_STATES: dict[str, tuple[str, str, str, str, str]] = {
    "idle": ("562 MHz", "4.05 W", "0 %", "0x0000000000000001", "P8"),
    "busy": ("2418 MHz", "35.21 W", "97 %", "0x0000000000000000", "P0"),
    "latched": ("611 MHz", "10.12 W", "98 %", "0x0000000000000000", "P0"),
}


def gpu_state(active: dict[str, object]) -> str:
    """idle unless a fault says otherwise: `gpu-busy` (load) or `gpu-latch` (the latch, which
    only shows under load)."""
    if active.get("gpu-latch"):
        return "latched"
    if active.get("gpu-busy"):
        return "busy"
    return "idle"


def cmd_nvidia_smi(argv: list[str]) -> int:
    """`nvidia-smi` (summary table) and `--query-gpu=... --format=csv[,noheader][,nounits]`."""
    utils = _utils_version()
    if utils is None:
        raise Fail("nvidia-smi: command not found", 127)
    st = state()
    driver = st.get("driver")
    if not driver:
        raise Fail("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                   "driver. Make sure that the latest NVIDIA driver is installed and running.", 9)
    if driver != utils:
        # NVML names its own version by major.minor (real sample: nvidia-smi__driver_library_mismatch_580)
        print(f"Failed to initialize NVML: Driver/library version mismatch\n"
              f"NVML library version: {'.'.join(utils.split('.')[:2])}")
        return 18
    state_name = gpu_state(faults())
    clock, power, busy, reasons, pstate = GPU_STATES[state_name]
    values = {
        "name": "NVIDIA GB10", "driver_version": driver,
        "clocks.sm": clock, "clocks.current.sm": clock,
        "clocks.max.sm": "3003 MHz", "clocks.max.graphics": "3003 MHz",
        "power.draw": power,
        "temperature.gpu": "41", "utilization.gpu": busy, "pstate": pstate,
        "clocks_event_reasons.active": reasons, "clocks_throttle_reasons.active": reasons,
        "pci.bus_id": "0000000F:01:00.0",
        # unified memory: NVML reports no framebuffer (real sample: …memory.total…__GB10)
        "memory.total": "[N/A]", "memory.used": "[N/A]", "memory.free": "[N/A]",
    }
    if any("uuid" in arg for arg in argv):  # the boot helpers cost an import; only when asked
        values["uuid"] = "GPU-" + B.mac_address(node_info().get("name", ""), "gpu").replace(":", "")
    headers = {"clocks.sm": "clocks.current.sm [MHz]", "clocks.current.sm": "clocks.current.sm [MHz]",
               "clocks.max.sm": "clocks.max.sm [MHz]", "clocks.max.graphics": "clocks.max.graphics [MHz]",
               "power.draw": "power.draw [W]", "utilization.gpu": "utilization.gpu [%]",
               "memory.total": "memory.total [MiB]", "memory.used": "memory.used [MiB]",
               "memory.free": "memory.free [MiB]"}
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is None and "--query-gpu" in argv:
        query = argv[argv.index("--query-gpu") + 1]
    if query is not None:
        fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "csv")
        opts = fmt.split(",")
        if "csv" not in opts:
            raise Fail("nvidia-smi: only --format=csv is emulated", 2)
        fields = [f.strip() for f in query.split(",") if f.strip()]
        for field in fields:
            if field not in values:
                print(f'Field "{field}" is not a valid field to query.')
                return 2
        if "noheader" not in opts:
            print(", ".join(headers.get(f, f) for f in fields))
        row = []
        for field in fields:
            value = values[field]
            if "nounits" in opts:
                for unit in (" MHz", " W", " %"):
                    value = value.removesuffix(unit)
            row.append(value)
        print(", ".join(row))
        return 0
    import time

    watts = f"{round(float(values['power.draw'].split()[0]))}W"
    perf = pstate
    print(time.strftime("%a %b %d %H:%M:%S %Y"))
    print(SUMMARY.format(driver=f"{driver:<23}", driver2=f"{driver:<15}", power=f"{watts:>16}", perf=perf,
                         temp=values["temperature.gpu"]))
    return 0


#: the summary table as nvidia-smi 580 prints it on a GB10 (real sample:
#: tests/fixtures/real/nvidia-smi__summary_table__GB10__k8s-device-plugin-1482.txt), then
#: the processes table
SUMMARY = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {driver}Driver Version: {driver2}CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |
| N/A   {temp}C    {perf}{power} /  N/A  | Not Supported          |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+"""


COMMANDS: dict[str, Callable[[list[str]], int]] = {"nvidia-smi": cmd_nvidia_smi}
