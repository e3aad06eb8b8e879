"""`efibootmgr`, `nvme` and `cpupower`: the node's UEFI boot entries, its NVMe controller's
features and its CPU frequency governor."""

from __future__ import annotations

from sparkbase_lab.shims.common import (
    RUN,
    Fail,
    LazyModule,
    faults,
    node_info,
    read_json,
    read_text,
    write_json,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkbase_lab import boot as B
else:
    B = LazyModule("sparkbase_lab.boot")

#: NVMe features set at run time (lost at power off, as the controller's are)
NVME_STATE = f"{RUN}/nvme.json"
FEATURES = {0x08: "Interrupt Coalescing", 0x0C: "Autonomous Power State Transition"}


def cmd_efibootmgr(argv: list[str]) -> int:
    """`efibootmgr [-v]`: the shim (Ubuntu) entry first, as a DGX OS install leaves it (fault
    `pxe-first`: a network boot entry before it). As efibootmgr 18 (Ubuntu 24.04's) prints them,
    each entry's device path follows its label with or without `-v`, a file path as
    `/\\EFI\\...` rather than 17's `File(...)` (tests/fixtures/real/efibootmgr_--create__…)."""
    if faults().get("no-efi"):
        raise Fail("EFI variables are not supported on this system.", 2)
    uuid = B.root_uuid(node_info().get("name", "spark"))
    pxe = bool(faults().get("pxe-first"))
    print(f"BootCurrent: 0001\nTimeout: 0 seconds\nBootOrder: {'0002,0001,0000' if pxe else '0001,0000'}")
    print("Boot0000* UEFI Misc Device\tPciRoot(0x0)/Pci(0x1,0x0)")
    print(f"Boot0001* Ubuntu\tHD(1,GPT,{uuid},0x800,0x100000)/\\EFI\\ubuntu\\shimaa64.efi")
    if pxe:  # the network entry EDK2 firmware names after the port's MAC, put first
        print("Boot0002* UEFI PXEv4 (MAC:4CBB470A0B1C)\tMAC(4cbb470a0b1c,0)/IPv4(0.0.0.0,0,DHCP)")
    return 0


def _device_ok(argv: list[str]) -> str:
    device = next((a for a in argv if a.startswith("/dev/nvme")), "")
    if not device:
        raise Fail("nvme: a device (/dev/nvme0 or /dev/nvme0n1) is required", 22)
    if not device.startswith(("/dev/nvme0", "/dev/nvme0n1")):
        raise Fail(f"open: No such file or directory\nfailed to open {device}", 2)
    return device


def _feature(argv: list[str]) -> int:
    for flag in ("-f", "--feature-id"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return int(argv[argv.index(flag) + 1], 0)
        prefix = f"{flag}="
        for arg in argv:
            if arg.startswith(prefix):
                return int(arg[len(prefix):], 0)
    raise Fail("nvme: feature-id required param", 22)


def _value(argv: list[str]) -> int:
    """set-feature's value: `-V VALUE`, `--value VALUE` or `--value=VALUE` (nvme-cli 2.x;
    `-v` is --verbose there, so `-v 263` sets 0, as on a real Spark with nvme-cli 2.8)."""
    for index, arg in enumerate(argv):
        if arg in ("-V", "--value") and index + 1 < len(argv):
            return int(argv[index + 1], 0)
        if arg.startswith("--value="):
            return int(arg.split("=", 1)[1], 0)
    return 0


def cmd_cpupower(argv: list[str]) -> int:
    """cpupower for the running kernel (run through Ubuntu's /usr/bin/cpupower wrapper):
    `frequency-set -g GOVERNOR` on every CPU, `frequency-info -p` (the current policy)."""
    from sparkbase_lab.shims.sysfs import CPU, set_governor

    words = [a for a in argv if not a.startswith("-c") and a != "all"]
    if words[:1] == ["frequency-set"] and "-g" in words and words.index("-g") + 1 < len(words):
        governor = words[words.index("-g") + 1]
        available = read_text(CPU / "cpufreq" / "policy0" / "scaling_available_governors").split()
        if governor not in available:
            raise Fail("Error setting new values. Common errors:\n- Do you have proper administration "
                       "rights? (super-user?)\n- Is the governor you requested available and modprobed?\n"
                       "- Trying to set an invalid policy?", 1)
        for cpu in set_governor(governor):
            print(f"Setting cpu: {cpu}")
        return 0
    if words[:1] == ["frequency-info"]:
        governor = read_text(CPU / "cpufreq" / "policy0" / "scaling_governor").strip()
        print(f"analyzing CPU 0:\n  current policy: frequency should be within the limits.\n"
              f"                  The governor \"{governor}\" may decide which speed to use")
        return 0
    raise Fail("cpupower: only frequency-set -g and frequency-info are emulated by the sparkbase lab", 1)


def feature_value(feature: int) -> int:
    """A feature's current value: APST follows `nvme_core.default_ps_max_latency_us` (0 turns
    it off); interrupt coalescing is 0 (off) until `nvme set-feature -f 8` changes it."""
    if feature == 0x0C:
        latency = read_text("/sys/module/nvme_core/parameters/default_ps_max_latency_us", "100000").strip()
        return 0 if latency == "0" else 1
    values: dict[str, int] = read_json(NVME_STATE, {})
    return int(values.get(str(feature), 0))


def cmd_nvme(argv: list[str]) -> int:
    """`nvme list`, `nvme get-feature DEV -f ID [-H]`, `nvme set-feature DEV -f ID -v VALUE`."""
    if not argv:
        raise Fail("usage: nvme <command> [<device>] [<args>]", 1)
    verb = argv[0]
    if verb == "list":
        print("Node                  Generic               SN                   Model"
              "                                    Namespace  Usage                      Format"
              "           FW Rev")
        print("--------------------- --------------------- -------------------- "
              "---------------------------------------- ---------- -------------------------- "
              "---------------- --------")
        print(f"{'/dev/nvme0n1':<21} {'/dev/ng0n1':<21} {'SPARKBASELAB0001':<20} {'sparkbase lab NVMe':<40} "
              f"{'0x1':<10} {'4.00  TB /   4.00  TB':<26} {'512   B +  0 B':<16} ERFM11.0")
        return 0
    if verb in ("get-feature", "set-feature"):
        _device_ok(argv)
        feature = _feature(argv)
        name = FEATURES.get(feature)
        if name is None:
            raise Fail(f"NVMe status: Invalid Field in Command: A reserved coded value or an unsupported "
                       f"value in a defined field(0x2) feature-id:{feature:#04x}", 2)
        if verb == "set-feature":
            new = _value(argv)
            if feature == 0x0C:
                raise Fail("NVMe status: Invalid Field in Command (APST follows nvme_core in the lab)", 2)
            values: dict[str, int] = read_json(NVME_STATE, {})
            values[str(feature)] = new
            write_json(NVME_STATE, values)
            print(f"set-feature:{feature:#04x} ({name}), value:{new:#010x}, cdw12:00000000, save:0")
            return 0
        value = feature_value(feature)
        # nvme-cli's `%#0*x` with width `result ? 10 : 8`: zero prints `00000000`, no `0x`
        print(f"get-feature:{feature:#04x} ({name}), Current value:{value:#010x}" if value
              else f"get-feature:{feature:#04x} ({name}), Current value:{0:08x}")
        if "-H" in argv or "--human-readable" in argv:
            if feature == 0x0C:
                state = "Enabled" if value else "Disabled"
                print(f"\tAutonomous Power State Transition Enable (APSTE): {state}")
            else:
                print(f"\tAggregation Time     (TIME): {((value >> 8) & 0xFF) * 100} usec")
                print(f"\tAggregation Threshold (THR): {(value & 0xFF) + 1}")
        return 0
    raise Fail(f"nvme: {verb} is not emulated by the sparkbase lab", 1)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "efibootmgr": cmd_efibootmgr, "nvme": cmd_nvme, "cpupower": cmd_cpupower,
}
