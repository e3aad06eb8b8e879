"""The read-only node commands asked most often, kept cheap to start (runs inside the node).

Every node command is a fresh `python3 -IS`, and the fact script of an audit runs several
per node, so their start-up is most of what an audit costs a node. This module imports
only `os` and `sys` (JSON is read with the C scanner, `_json`), so `uname`, `getconf`,
`nvidia-smi` and `mokutil` cost little more than Python's own start: about a third of
what importing `node_commands` costs (pathlib, json and re alone are most of that). The
helpers here (state, firmware, faults, JSON files) are the ones `node_commands` uses too;
it re-exports them, so there is one implementation of each. Copied into each node as
`/usr/local/lib/sparkbase-lab/node_query.py`.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

    StrPath = str | os.PathLike[str]

RUN = "/run/sparkbase-lab"
FIRMWARE = f"{RUN}/firmware/firmware.json"
FAULTS = f"{RUN}/firmware/faults.json"
STATE = f"{RUN}/state.json"
NODE = "/etc/sparkbase-lab/node.json"
SYSTEMD_ETC = "/etc/systemd/system"
ARCH = "aarch64"


def _boot() -> ModuleType:
    """The boot helpers (`sparkbase.lab.boot`; inside a node, the copy next to this file)."""
    try:
        from sparkbase.lab import boot
    except ImportError:
        import sparkbase_lab_boot as boot  # type: ignore[import-not-found,no-redef,unused-ignore]
    return boot


class _ScanContext:
    """What the C JSON scanner reads from `json.JSONDecoder` (defaults, strict)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


def loads(text: str) -> Any:
    """`json.loads` without importing `json` (and `re` with it); raises ValueError."""
    try:
        from _json import make_scanner
    except ImportError:  # a Python without the C accelerator
        import json

        return json.loads(text)
    body = text.strip(" \t\n\r")
    try:
        value, end = make_scanner(_ScanContext())(body, 0)  # type: ignore[arg-type]  # duck-typed
    except StopIteration as exc:
        raise ValueError("Expecting value") from exc
    if end != len(body):
        raise ValueError("Extra data")
    return value


class Fail(Exception):
    """A command failure: message for stderr and an exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def read_json(path: StrPath, default: Any) -> Any:
    """The JSON document in `path`, or `default` when it is missing or not JSON."""
    try:
        return loads(read_file(path))
    except (OSError, ValueError):
        return default


def write_json(path: StrPath, data: Any) -> None:
    """Write `data` to `path` as JSON, atomically (temp file, then replace)."""
    import json

    path = os.fspath(path)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_file(path: StrPath) -> str:
    """The text of `path` (raises OSError)."""
    with open(os.fspath(path)) as fh:
        return fh.read()


def read_text(path: StrPath, default: str = "") -> str:
    """The text of `path`, or `default` when it cannot be read."""
    try:
        return read_file(path)
    except OSError:
        return default


def state() -> dict[str, Any]:
    data: dict[str, Any] = read_json(STATE, {})
    if not data:
        raise Fail("sparkbase lab: node state missing (/run/sparkbase-lab/state.json)")
    return data


def faults() -> dict[str, Any]:
    data: dict[str, Any] = read_json(FAULTS, {})
    return data


def firmware() -> dict[str, Any]:
    data: dict[str, Any] = read_json(FIRMWARE, {})
    data.setdefault("secure_boot", True)
    data.setdefault("enrolled", [])
    data.setdefault("pending", [])
    return data


def node_info() -> dict[str, Any]:
    data: dict[str, Any] = read_json(NODE, {"name": os.uname().nodename})
    return data


def _utils_version() -> str | None:
    text = read_text("/usr/share/sparkbase-lab/nvidia-utils.version").strip()
    return text or None


def cmd_uname(argv: list[str]) -> int:
    st = state()
    release = st["release"]
    version = f"#{release.split('-')[1]}-Ubuntu SMP PREEMPT_DYNAMIC Thu Oct  9 10:00:00 UTC 2025"
    node = os.uname().nodename
    fields = {"s": "Linux", "n": node, "r": release, "v": version, "m": ARCH, "p": ARCH,
              "i": ARCH, "o": "GNU/Linux"}
    long = {"--kernel-name": "s", "--nodename": "n", "--kernel-release": "r",
            "--kernel-version": "v", "--machine": "m", "--processor": "p",
            "--hardware-platform": "i", "--operating-system": "o", "--all": "a"}
    wanted: list[str] = []
    for arg in argv:
        if arg in long:
            wanted.append(long[arg])
        elif arg.startswith("-") and not arg.startswith("--"):
            wanted.extend(arg[1:])
        else:
            raise Fail(f"uname: extra operand '{arg}'")
    if not wanted:
        wanted = ["s"]
    if "a" in wanted:
        wanted = list("snrvmpio")
    unknown = [w for w in wanted if w not in fields]
    if unknown:
        raise Fail(f"uname: invalid option -- '{unknown[0]}'")
    print(" ".join(fields[k] for k in "snrvmpio" if k in wanted))
    return 0


def cmd_getconf(argv: list[str]) -> int:
    if len(argv) == 1 and argv[0] in ("PAGESIZE", "PAGE_SIZE"):
        print(state()["page_size"])
        return 0
    if len(argv) == 1 and argv[0] in ("_NPROCESSORS_ONLN", "_NPROCESSORS_CONF"):
        print(_boot().NCPUS)
        return 0
    import subprocess  # the machine's getconf answers every other variable

    return subprocess.call(["/usr/bin/getconf", *argv])


def cmd_nvidia_smi(argv: list[str]) -> int:
    utils = _utils_version()
    if utils is None:
        raise Fail("nvidia-smi: command not found", 127)
    st = state()
    driver = st.get("driver")
    if not driver:
        raise Fail("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                   "driver. Make sure that the latest NVIDIA driver is installed and running.", 9)
    if driver != utils:
        print(f"Failed to initialize NVML: Driver/library version mismatch\n"
              f"NVML library version: {utils}")
        return 18
    latched = bool(faults().get("gpu-latch"))
    values = {
        "name": "NVIDIA GB10", "driver_version": driver,
        "clocks.sm": "611 MHz" if latched else "2418 MHz",
        "clocks.current.sm": "611 MHz" if latched else "2418 MHz",
        "clocks.max.sm": "3003 MHz", "clocks.max.graphics": "3003 MHz",
        "power.draw": "10.12 W" if latched else "35.21 W",
        "temperature.gpu": "41", "utilization.gpu": "0 %", "pstate": "P0",
        "clocks_event_reasons.active": "0x0000000000000000",
    }
    if any("uuid" in arg for arg in argv):  # the boot helpers cost an import; only when asked
        values["uuid"] = "GPU-" + _boot().mac_address(node_info().get("name", ""), "gpu").replace(":", "")
    headers = {"clocks.sm": "clocks.current.sm [MHz]", "clocks.current.sm": "clocks.current.sm [MHz]",
               "clocks.max.sm": "clocks.max.sm [MHz]", "clocks.max.graphics": "clocks.max.graphics [MHz]",
               "power.draw": "power.draw [W]", "utilization.gpu": "utilization.gpu [%]"}
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

    clock = values["clocks.sm"]
    power = values["power.draw"].replace(" ", "")
    print(f"""{time.strftime('%a %b %d %H:%M:%S %Y')}
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {driver:<10}             Driver Version: {driver:<10}     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |
| N/A   41C    P0             {power:>7} /  N/A  |             Not Supported  |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
| SM clock: {clock:<10}                                                                    |
+-----------------------------------------------------------------------------------------+""")
    return 0


def _key_record(path: str) -> dict[str, str]:
    import base64
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise Fail(f"Failed to read {path}: {exc.strerror}") from exc
    if not data:
        raise Fail(f"Failed to read {path}")
    return {"fingerprint": _boot().sha1_fingerprint(data), "subject": _subject(path),
            "der": base64.b64encode(data).decode()}


def _subject(path: str) -> str:
    import subprocess
    try:
        out = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", path, "-noout",
                              "-subject"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "CN=unknown"
    line = out.stdout.strip()
    return line.split("=", 1)[1].strip() if out.returncode == 0 and "=" in line else "CN=unknown"


def _print_keys(keys: list[dict[str, str]]) -> None:
    for i, key in enumerate(keys, 1):
        print(f"[key {i}]\nSHA1 Fingerprint: {key['fingerprint']}\nCertificate:\n    Data:\n"
              f"        Subject: {key.get('subject', '')}\n")


def cmd_mokutil(argv: list[str]) -> int:
    fw = firmware()
    if not argv:
        raise Fail("mokutil: no operation given", 1)
    op = argv[0]
    if op == "--sb-state":
        print("SecureBoot enabled" if fw["secure_boot"] else "SecureBoot disabled")
        return 0
    if op in ("--list-enrolled", "-l"):
        _print_keys(fw["enrolled"])
        return 0
    if op in ("--list-new", "-N"):
        if not fw["pending"]:
            print("MokNew is empty")
            return 1
        _print_keys(fw["pending"])
        return 0
    if op in ("--import", "-i"):
        if len(argv) < 2:
            raise Fail("mokutil: --import needs a file")
        rec = _key_record(argv[1])
        if rec["fingerprint"] in {k["fingerprint"] for k in fw["enrolled"]}:
            print(f"SKIP: {argv[1]} is already enrolled")
            return 0
        if rec["fingerprint"] in {k["fingerprint"] for k in fw["pending"]}:
            print(f"SKIP: {argv[1]} is already in the enrollment request")
            return 0
        rest = argv[2:]
        if not ({"--root-pw", "-P", "--hash-file", "-f"} & set(rest)):
            if sys.stdin.isatty():
                print("input password: \ninput password again: ")
            else:
                sys.stdin.read()
        fw["pending"].append(rec)
        write_json(FIRMWARE, fw)
        return 0
    if op in ("--test-key", "-t"):
        rec = _key_record(argv[1])
        if rec["fingerprint"] in {k["fingerprint"] for k in fw["enrolled"]}:
            print(f"{argv[1]} is already enrolled")
            return 0
        print(f"{argv[1]} is not enrolled")
        return 1
    if op == "--revoke-import":
        fw["pending"] = []
        write_json(FIRMWARE, fw)
        return 0
    raise Fail(f"mokutil: {op} is not emulated by the sparkbase lab", 2)


# --- ip (addr/link show, read-only) -----------------------------------------------------

NET = f"{RUN}/net.json"
#: the ConnectX-7 RDMA devices and their netdevs, and the management NIC (the same values
#: as `sparkbase.lab.boot.FABRIC` / `MGMT_NETDEV`, which this module must not import)
FABRIC = {
    "rocep1s0f0": "enp1s0f0np0",
    "rocep1s0f1": "enp1s0f1np1",
    "roceP2p1s0f0": "enP2p1s0f0np0",
    "roceP2p1s0f1": "enP2p1s0f1np1",
}
MGMT_NETDEV = "enP7s7"
FOREVER = 4294967295


def mac_address(node: str, netdev: str) -> str:
    """A stable, locally administered MAC for a node's netdev (as `boot.mac_address`)."""
    from hashlib import sha256

    digest = sha256(f"{node}/{netdev}".encode()).digest()
    return "4c:bb:47:" + ":".join(f"{b:02x}" for b in digest[:3])


def default_net() -> dict[str, Any]:
    """Every emulated netdev as it is before any netplan: up, MTU 1500, no address."""
    node = node_info().get("name", "spark")
    return {
        netdev: {"mtu": 1500, "up": True, "addresses": [], "mac": mac_address(node, netdev)}
        for netdev in [*FABRIC.values(), MGMT_NETDEV]
    }


def links() -> list[dict[str, Any]]:
    """Every netdev (and `lo`) as iproute2's `ip -j addr show` describes it."""
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    down = set(faults().get("link-down", []))
    out: list[dict[str, Any]] = [{
        "ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536,
        "qdisc": "noqueue", "operstate": "UNKNOWN", "group": "default", "txqlen": 1000,
        "link_type": "loopback", "address": "00:00:00:00:00:00", "broadcast": "00:00:00:00:00:00",
        "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8, "scope": "host",
                       "label": "lo", "valid_life_time": FOREVER, "preferred_life_time": FOREVER}],
    }]
    hca_of = {v: k for k, v in FABRIC.items()}
    for index, (name, dev) in enumerate(sorted(net.items(), key=lambda kv: kv[0] != MGMT_NETDEV), 2):
        admin_up = dev.get("up", True)
        carrier = admin_up and name not in down and hca_of.get(name) not in down
        flags = ["BROADCAST", "MULTICAST"]
        if admin_up:
            flags.append("UP")
        if carrier:
            flags.append("LOWER_UP")
        addr_info = []
        for cidr in dev.get("addresses", []) if admin_up else []:
            ip, _, prefix = cidr.partition("/")
            family = "inet6" if ":" in ip else "inet"
            addr_info.append({"family": family, "local": ip, "prefixlen": int(prefix or 32),
                              "scope": "global", "label": name, "valid_life_time": FOREVER,
                              "preferred_life_time": FOREVER})
        out.append({
            "ifindex": index, "ifname": name, "flags": flags, "mtu": dev.get("mtu", 1500),
            "qdisc": "mq", "operstate": "UP" if carrier else "DOWN", "group": "default",
            "txqlen": 1000, "link_type": "ether", "address": dev.get("mac", ""),
            "broadcast": "ff:ff:ff:ff:ff:ff", "addr_info": addr_info,
        })
    return out


def dumps(value: Any) -> str:
    """Compact JSON (`json.dumps` output, separators `, ` and `: `) of str/int/bool/None/
    list/dict values, without importing `json` (and `re` with it)."""
    if isinstance(value, str):
        from _json import encode_basestring_ascii

        return str(encode_basestring_ascii(value))
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{dumps(str(k))}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    raise TypeError(f"not JSON: {type(value).__name__}")


def cmd_ip(argv: list[str]) -> int:
    """`ip -j addr show` here (what the audit asks); every other form in `node_commands`."""
    if argv in (["-j", "addr", "show"], ["-j", "addr"], ["-json", "addr", "show"]):
        print(dumps(links()))
        return 0
    status: int = _full().cmd_ip(argv)
    return status


def _full() -> ModuleType:
    """`node_commands`, for the forms this module hands over."""
    try:
        from sparkbase.lab.shims import node_commands
    except ImportError:  # inside a node: the copy next to this file
        import node_commands  # type: ignore[import-not-found,no-redef,unused-ignore]
    return node_commands


# --- systemd (read-only) -----------------------------------------------------------------

SYSTEMD_LIB = "/lib/systemd/system"
ACTIVE = f"{RUN}/active"


def unit_path(unit: str) -> str | None:
    """Where a unit file (or its link) is: /etc/systemd/system first, then /lib."""
    for base in (SYSTEMD_ETC, SYSTEMD_LIB):
        path = f"{base}/{unit}"
        if os.path.lexists(path):
            return path
    return None


def _listdir(path: str) -> list[str]:
    try:
        return [name for name in os.listdir(path) if not name.startswith(".")]
    except OSError:
        return []


def install_section(path: str) -> dict[str, list[str]]:
    """The `[Install]` keys of a unit file (WantedBy, RequiredBy, Alias...)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in read_text(path).splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
            continue
        if section == "[Install]" and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).extend(value.split())
    return out


def unit_file_state(unit: str) -> str | None:
    """`systemctl is-enabled` as systemd decides it from the links; None: no such unit."""
    etc = f"{SYSTEMD_ETC}/{unit}"
    if os.path.islink(etc) and os.readlink(etc) == "/dev/null":
        return "masked"
    path = unit_path(unit)
    if path is None:
        return None
    names = _listdir(SYSTEMD_ETC)
    if any(name.endswith(".wants") and os.path.lexists(f"{SYSTEMD_ETC}/{name}/{unit}") for name in names):
        return "enabled"
    real = os.path.realpath(path)
    for name in names:
        link = f"{SYSTEMD_ETC}/{name}"
        if name.endswith(".service") and name != unit and os.path.islink(link) \
                and os.path.realpath(link) == real:
            return "enabled"
    if os.path.islink(etc) and os.path.realpath(etc) != etc and unit != os.path.basename(real):
        return "alias"
    return "disabled" if install_section(real) else "static"


def active_units() -> set[str]:
    """Units running now (recomputed at every boot and start/stop)."""
    return {line.strip() for line in read_text(ACTIVE).splitlines() if line.strip()}


def show(unit: str, prop: str) -> str:
    """One property as `systemctl show -p PROP UNIT` prints its value."""
    if prop == "ActiveState":
        path = unit_path(unit)
        real = os.path.basename(os.path.realpath(path)) if path is not None else unit
        active = active_units()
        return "active" if real in active or unit in active else "inactive"
    if prop == "UnitFileState":
        return unit_file_state(unit) or ""
    if prop == "Id":
        return unit
    value = ""
    path = unit_path(unit)
    files = [os.path.realpath(path)] if path is not None else []
    for base in (SYSTEMD_LIB, SYSTEMD_ETC, "/run/systemd/system"):
        directory = f"{base}/{unit}.d"
        files += sorted(f"{directory}/{n}" for n in _listdir(directory) if n.endswith(".conf"))
    for name in files:
        for raw in read_text(name).splitlines():
            key, sep, val = raw.strip().partition("=")
            if sep and key.strip() == prop:
                value = val.strip()
    return value


def default_target() -> str:
    """The default systemd target: where /etc/systemd/system/default.target points."""
    link = f"{SYSTEMD_ETC}/default.target"
    if os.path.islink(link):
        return os.path.basename(os.readlink(link))
    return "graphical.target"


def cmd_systemctl(argv: list[str]) -> int:
    """`systemctl get-default` here; every other use in `node_commands`."""
    if argv == ["get-default"]:
        print(default_target())
        return 0
    if argv and argv[0] == "show" and all(not a.startswith("-") or a in ("-p", "--property") for a in argv):
        # `systemctl show -p P [-p P…] UNIT…` (the audit's form): one block per unit
        props: list[str] = []
        units: list[str] = []
        words = iter(argv[1:])
        for word in words:
            if word in ("-p", "--property"):
                props += next(words, "").split(",")
            else:
                units.append(word if "." in word else word + ".service")
        for index, unit in enumerate(units):
            if index:
                print()
            for prop in props or ["ActiveState", "UnitFileState"]:
                print(f"{prop}={show(unit, prop)}")
        return 0
    status: int = _full().cmd_systemctl(argv)
    return status


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "uname": cmd_uname, "getconf": cmd_getconf, "nvidia-smi": cmd_nvidia_smi, "mokutil": cmd_mokutil,
    "systemctl": cmd_systemctl, "ip": cmd_ip,
}


def main(command: str, argv: list[str]) -> int:
    """Run one of these commands; return its exit status."""
    try:
        return COMMANDS[command](argv)
    except Fail as exc:
        if str(exc):
            print(str(exc), file=sys.stderr)
        return exc.status
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:]))
