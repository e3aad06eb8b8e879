"""The fabric (section `fabric`): netdevs (`ip -j addr show`), RDMA devices (`ls
/sys/class/infiniband`) and the GID tables of their ports (sysfs, `parse_gid_table`); and
netplan as the node has it: which YAML files it reads, and which interfaces each configures.

netplan reads `/lib/netplan/*.yaml`, `/etc/netplan/*.yaml` and `/run/netplan/*.yaml`
(netplan-generate(8) "HANDLING MULTIPLE FILES", canonical/netplan e9dd90a9, src/util.c): a file
in /run shadows (replaces whole) one of the same name in /etc, which shadows one in /lib; the
files left are read in byte order of their names, whatever their directory, each later one
amending the earlier (mappings merged, sequences such as `addresses` appended). So two files
that both name a port both configure it, and the port carries both files' addresses.

`parse_netplan_listing` reads what `NETPLAN_FILES_COMMAND` (below) prints (every file's
name, mode and exact bytes, base64); `effective_sources` applies the shadowing;
`parse_netplan_yaml` reads one file (safe loading, bounded) into the interfaces each of its
definitions configures, as netplan's parser (src/parse.c `handle_network_type`) reads them:
a physical definition without `match:` configures the interface named by its ID, one with
`match: {name: GLOB}` what the glob matches, `set-name:` the name it gives; a bond, bridge or
VRF takes over its `interfaces:`. A definition that matches only by MAC address or driver
cannot be tied to an interface name here: it may configure any (`Netdef.unnamed`).

Pure: text in, typed values out; `ValueError` for a file netplan would not read.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import json
import posixpath
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkbase.facts.model import Gid, GidEntry, Interface, NetplanListing, NetplanSource
from sparkbase.facts.parsers.lines import node_lines, parse_single_line
from sparkbase.facts.script import FactPlan, FileRead, Read, Reader, cmd, fixed
from sparkbase.model.netplan import NETPLAN_DIRS
from sparkbase.model.yamlio import MAX_DEPTH, flow_too_deep

RDMA_CLASS = "/sys/class/infiniband"
#: the section holding the GID tables (`parse_gid_table`)
GID_TABLE_SECTION = "gid-table"
#: the section listing every netplan file (`parse_netplan_listing`)
NETPLAN_SECTION = "netplan"
#: the largest netplan file read whole; a larger one is listed, never parsed
MAX_NETPLAN_BYTES = 64 * 1024
#: the most files listed (the rest are named as not read)
MAX_NETPLAN_FILES = 64
#: the first word of a listed file's line, of a listed entry that is not a regular file, and
#: of the line saying more files were there than listed
FILE, OTHER, MORE = "F", "O", "MORE"
#: device types whose definitions name physical interfaces (match: and set-name: apply)
PHYSICAL_TYPES = ("ethernets", "wifis", "modems", "nm-devices")
#: device types of virtual interfaces: the ID is the interface's name
VIRTUAL_TYPES = ("bonds", "bridges", "vlans", "tunnels", "vrfs", "dummy-devices", "virtual-ethernets")
#: device types that take over other interfaces (`interfaces:` lists them by ID)
MEMBER_TYPES = ("bonds", "bridges", "vrfs")
#: keys of `network:` that define no interface
GLOBAL_KEYS = ("version", "renderer", "openvswitch")
#: the fabric's interfaces as sparkbase sets them: netdev -> netplan key -> value
Fabric = Mapping[str, Mapping[str, Any]]
#: the longest number read in a netplan file (an MTU, a VLAN id)
_MAX_NUMBER_CHARS = 40


def _decoded(word: str, what: str) -> bytes:
    try:
        return base64.b64decode(word, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"netplan listing: {what} is not base64 ({exc})") from None


def _source(words: list[str]) -> NetplanSource:
    """One `F NAME64 LINK MODE DATA64` or `O NAME64 LINK` line."""
    path = _decoded(words[1], "a name").decode("utf-8", errors="backslashreplace")
    link = words[2] == "L"
    if words[0] == OTHER:
        return NetplanSource(path, None, link=link, problem="not a regular file")
    if len(words) != 5 or not words[3].isdigit() or not words[4].startswith("b64:"):
        return NetplanSource(path, None, link=link, problem="could not be read")
    try:
        data = _decoded(words[4][4:], f"the content of {path}")
    except ValueError:
        return NetplanSource(path, None, link=link, problem="could not be read")
    mode = int(words[3], 8)
    if len(data) > MAX_NETPLAN_BYTES:
        return NetplanSource(path, None, None, mode, link, f"larger than {MAX_NETPLAN_BYTES} bytes: not read")
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return NetplanSource(path, None, digest, mode, link, f"not UTF-8 text (byte {exc.start})")
    return NetplanSource(path, text, digest, mode, link)


def parse_netplan_listing(text: str) -> NetplanListing:
    """`NETPLAN_FILES_COMMAND`'s output -> every listed file (exact text, sha256, mode)."""
    sources: list[NetplanSource] = []
    more = False
    for line in node_lines(text):
        words = line.split(" ")
        if words == [MORE]:
            more = True
        elif len(words) >= 3 and words[0] in (FILE, OTHER):
            sources.append(_source(words))
        elif line.strip():
            raise ValueError(f"netplan listing: unexpected line {line[:60]!r}")
    return NetplanListing(tuple(sources), more)


def _rank(path: str) -> int:
    """Which of NETPLAN_DIRS holds `path` (its index; the directory may sit under another
    root, as in a test), -1 for none."""
    directory = posixpath.dirname(path)
    return next((index for index, known in reversed(list(enumerate(NETPLAN_DIRS)))
                 if directory == known or directory.endswith(known)), -1)


def effective_sources(sources: Iterable[NetplanSource]) -> list[NetplanSource]:
    """The files netplan reads, in the order it reads them: per name the one of the highest
    directory (/run over /etc over /lib), sorted by name in byte order (src/util.c: strcmp)."""
    chosen: dict[str, NetplanSource] = {}
    for source in sources:
        kept = chosen.get(source.name)
        if kept is None or _rank(source.path) > _rank(kept.path):
            chosen[source.name] = source
    return [chosen[name] for name in sorted(chosen, key=lambda name: name.encode())]


# --- one file -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Netdef:
    """One netplan definition: its device type and ID, the interface names (or globs) it
    configures, and whether it matches by something other than a name (MAC, driver), so
    that which interface it configures cannot be told from the file."""

    kind: str
    id: str
    names: tuple[str, ...]
    unnamed: bool = False

    def configures(self, interface: str) -> bool:
        """Whether this definition names `interface` (its ID, a `match: name` glob, its
        `set-name`, or a member of a bond/bridge/VRF)."""
        return any(fnmatch.fnmatchcase(interface, name) for name in self.names)

    def how(self, interface: str) -> str:
        """How the definition configures `interface`, for a person."""
        if self.kind in MEMBER_TYPES and interface != self.id:
            return f"{self.kind}.{self.id} takes it over (interfaces:)"
        return f"{self.kind}.{self.id}"


@dataclass(frozen=True)
class NetplanConfig:
    """What one netplan file defines."""

    netdefs: tuple[Netdef, ...] = ()

    def configuring(self, interface: str) -> list[Netdef]:
        """The definitions that configure `interface` by name."""
        return [netdef for netdef in self.netdefs if netdef.configures(interface)]

    def unnamed(self) -> list[Netdef]:
        """The definitions that match by MAC address or driver only."""
        return [netdef for netdef in self.netdefs if netdef.unnamed]


def load_netplan_yaml(text: str) -> Any:
    """One netplan file as plain data (ruamel's safe loader: no tags, no objects), or
    `ValueError` with the line where it stops; bounded: MAX_NETPLAN_BYTES, flow nesting."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError
    if len(text.encode()) > MAX_NETPLAN_BYTES:
        raise ValueError(f"larger than {MAX_NETPLAN_BYTES} bytes")
    deep = flow_too_deep(text)
    if deep is not None:
        raise ValueError(f"line {deep[0]}: nested deeper than {MAX_DEPTH} levels")
    yaml = YAML(typ="safe", pure=True)
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = " ".join(str(exc.problem or exc.context or "not YAML").split())
        raise ValueError(f"{where}{problem}") from None
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    except Exception as exc:  # ruamel raises plain errors on odd scalars and readers
        raise ValueError(" ".join(str(exc).split())[:200] or type(exc).__name__) from None


def _mapping(value: Any, where: str) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is not a mapping")
    return value


def _names(kind: str, ident: str, body: Mapping[Any, Any]) -> tuple[tuple[str, ...], bool]:
    """The interface names a definition configures, and whether it matches without a name."""
    if kind not in PHYSICAL_TYPES:
        return (ident,), False
    names: list[str] = []
    match = body.get("match")
    if match is None:
        names.append(ident)
    elif isinstance(match, Mapping):
        if match.get("name") is not None:
            names.append(str(match["name"]))
    else:
        raise ValueError(f"network.{kind}.{ident}.match is not a mapping")
    if body.get("set-name") is not None:
        names.append(str(body["set-name"]))
    return tuple(names), not names


def _members(kind: str, ident: str, body: Mapping[Any, Any]) -> tuple[str, ...]:
    if kind not in MEMBER_TYPES or body.get("interfaces") is None:
        return ()
    members = body["interfaces"]
    if not isinstance(members, list):
        raise ValueError(f"network.{kind}.{ident}.interfaces is not a list")
    return tuple(str(member) for member in members)


def netplan_config(data: Any) -> NetplanConfig:
    """Loaded netplan data -> its definitions; `ValueError` where netplan would refuse the
    shape (a top-level key other than `network`, a key of `network` that is no device type)."""
    root = _mapping(data, "the document")
    extra = [str(key) for key in root if key != "network"]
    if extra:
        raise ValueError(f"unknown top-level key {extra[0]!r} (netplan reads only 'network:')")
    network = _mapping(root.get("network"), "network")
    netdefs: list[Netdef] = []
    for kind, block in network.items():
        kind = str(kind)
        if kind in GLOBAL_KEYS:
            continue
        if kind not in PHYSICAL_TYPES + VIRTUAL_TYPES:
            raise ValueError(f"unknown key network.{kind} (no netplan device type)")
        for ident, body in _mapping(block, f"network.{kind}").items():
            ident = str(ident)
            if ident == "renderer":  # the per-type renderer, not a definition
                continue
            definition = _mapping(body, f"network.{kind}.{ident}")
            names, unnamed = _names(kind, ident, definition)
            names += _members(kind, ident, definition)
            netdefs.append(Netdef(kind, ident, names, unnamed))
    return NetplanConfig(tuple(netdefs))


def parse_netplan_yaml(text: str) -> NetplanConfig:
    """One netplan file's text -> the definitions in it (`ValueError`: netplan would not read it)."""
    return netplan_config(load_netplan_yaml(text))


# --- the settings of one definition, as netplan reads them ---------------------------------------

_TRUE = {"true", "on", "yes", "y"}
_FALSE = {"false", "off", "no", "n"}


def netplan_bool(value: Any) -> Any:
    """A boolean as netplan reads it (src/parse.c `handle_generic_bool`: true/on/yes/y and
    false/off/no/n, any case); anything else as it is."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    return value


def _setting(key: str, value: Any) -> Any:
    """One setting normalised the way netplan reads it, so the same meaning compares equal."""
    if key in ("dhcp4", "dhcp6"):
        return netplan_bool(value)
    if key == "mtu":
        text = str(value)
        return int(text) if text.isdigit() and len(text) <= _MAX_NUMBER_CHARS else value
    if isinstance(value, list):
        return [str(item) if not isinstance(item, Mapping | list) else item for item in value]
    return value


def ethernet_settings(data: Any, ids: Sequence[str], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """`network.ethernets.ID.KEY` of each of `ids` that the data defines, for `keys` only,
    normalised as netplan reads them (`no` is false, `"9000"` is 9000); a key the definition
    does not set is left out."""
    ethernets = _mapping(_mapping(_mapping(data, "the document").get("network"), "network").get("ethernets"),
                         "network.ethernets")
    found: dict[str, dict[str, Any]] = {}
    for ident in ids:
        if ident not in ethernets:
            continue
        body = _mapping(ethernets[ident], f"network.ethernets.{ident}")
        found[ident] = {key: _setting(key, body[key]) for key in keys if key in body}
    return found


def wanted_settings(fabric: Fabric) -> dict[str, dict[str, Any]]:
    """The fabric's settings normalised as `ethernet_settings` reads a file."""
    return ethernet_settings({"network": {"ethernets": fabric}}, list(fabric),
                             sorted({key for settings in fabric.values() for key in settings}))


def fabric_differences(found: Mapping[str, Mapping[str, Any]], fabric: Fabric) -> list[str]:
    """Where the fabric settings found in a file differ from `fabric` (`NETDEV KEY: found,
    wants VALUE`), in port order; empty when they mean the same."""
    wanted = wanted_settings(fabric)
    differences: list[str] = []
    for netdev, settings in wanted.items():
        have = found.get(netdev)
        if have is None:
            differences.append(f"{netdev}: not configured")
            continue
        differences += [f"{netdev} {key}: {have.get(key, 'unset')}, wants {value}"
                        for key, value in settings.items() if have.get(key) != value]
    return differences


def found_settings(text: str, fabric: Fabric) -> dict[str, dict[str, Any]]:
    """The fabric interfaces' settings in a netplan file's text (`ValueError`: it does not parse)."""
    keys = sorted({key for settings in fabric.values() for key in settings})
    return ethernet_settings(load_netplan_yaml(text), list(fabric), keys)



def parse_ip_addr_json(text: str) -> dict[str, Interface]:
    """`ip -j addr show` → netdev → MTU, operstate and IPv4 addresses."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("ip -j did not print a list")
    interfaces: dict[str, Interface] = {}
    for link in data:
        addresses = tuple(
            f"{addr['local']}/{addr['prefixlen']}"
            for addr in link.get("addr_info", [])
            if addr.get("family") == "inet"
        )
        interfaces[link["ifname"]] = Interface(
            name=link["ifname"],
            mtu=int(link["mtu"]),
            operstate=str(link.get("operstate", "UNKNOWN")),
            addresses=addresses,
        )
    return interfaces


def parse_ls(text: str) -> tuple[str, ...]:
    """`ls -1 DIR` → entries."""
    return tuple(sorted(line.strip() for line in node_lines(text) if line.strip()))


_GID_FILE = re.compile(r"^/sys/class/infiniband/(?P<hca>[^/]+)/ports/(?P<port>\d+)/gids/(?P<index>\d+)$")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def parse_gid_table(text: str) -> tuple[GidEntry, ...]:
    """The GID-table section (`GID_TABLE_COMMAND`): one `FILE<TAB>GID<TAB>TYPE<TAB>NDEV` line
    per filled entry, FILE being `/sys/class/infiniband/HCA/ports/P/gids/N`, each field what
    sysfs holds (`gid_attrs/types/N` is `RoCE v2` or `IB/RoCE v1`; type and netdev are empty
    when the kernel would not tell them). Sorted by device, port and index; an all-zero GID
    (an empty slot) is left out."""
    entries: list[GidEntry] = []
    for line in node_lines(text):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise ValueError(f"not a GID table line: {line[:120]!r}")
        path, gid, kind, ndev = (field.strip() for field in fields)
        where = _GID_FILE.match(path)
        if where is None:
            raise ValueError(f"not a GID file: {path[:120]!r}")
        if not gid or gid == _ZERO_GID:
            continue
        entries.append(GidEntry(hca=where["hca"], port=int(where["port"]), index=int(where["index"]),
                                gid=Gid(gid=gid, type=kind or None), ndev=ndev or None))
    return tuple(sorted(entries, key=lambda e: (e.hca, e.port, e.index)))


#: every filled GID entry of every port of every RDMA device, as `FILE<TAB>GID<TAB>TYPE<TAB>NDEV`
#: lines: shell builtins only (`read` of each sysfs file, no process per entry), empty slots
#: (the all-zero GID) skipped; the type and netdev files of a slot the kernel will not describe
#: fail to read (EINVAL) and leave those fields empty
GID_TABLE_COMMAND = (
    f"for f in {RDMA_CLASS}/*/ports/*/gids/*; do "
    'read -r g <"$f" || continue; '
    "case $g in 0000:0000:0000:0000:0000:0000:0000:0000) continue;; esac; "
    'd=${f%/gids/*}; i=${f##*/}; t=; n=; '
    'read -r t <"$d/gid_attrs/types/$i"; read -r n <"$d/gid_attrs/ndevs/$i"; '
    "printf '%s\\t%s\\t%s\\t%s\\n' \"$f\" \"$g\" \"$t\" \"$n\"; "
    "done 2>/dev/null; true"
)


def netplan_files_command() -> str:
    """Shell text printing one line per `*.yaml` entry of netplan's three directories:
    `F NAME64 L|- MODE b64:DATA64` for a regular file (its target's, for a link: netplan
    reads through links; at most MAX_NETPLAN_BYTES + 1 bytes, so a larger one shows as
    larger), `O NAME64 L|-` for anything else, `MORE` after MAX_NETPLAN_FILES entries.
    Names and bytes go base64-encoded, so no name or content can forge a line. Exits 0."""
    globs = " ".join(f"{shlex.quote(directory)}/*.yaml" for directory in NETPLAN_DIRS)
    b64 = "base64 | tr -d '\\n'"
    return (
        f'n=0; for f in {globs}; do {{ [ -e "$f" ] || [ -L "$f" ]; }} || continue; '
        f'n=$((n+1)); if [ "$n" -gt {MAX_NETPLAN_FILES} ]; then echo MORE; break; fi; '
        f'm=$(printf %s "$f" | {b64}); if [ -L "$f" ]; then l=L; else l=-; fi; '
        f'if [ -f "$f" ]; then printf \'F %s %s %s b64:%s\\n\' "$m" "$l" "$(stat -L -c %a -- "$f")" '
        f'"$(head -c {MAX_NETPLAN_BYTES + 1} -- "$f" | {b64})"; '
        f'else printf \'O %s %s\\n\' "$m" "$l"; fi; done; true'
    )


NETPLAN_FILES_COMMAND = netplan_files_command()


#: the netdevs with their addresses, and the RDMA devices
address_sections = fixed(("ip-addr", cmd("ip", "-j", "addr", "show")),
                         ("rdma", cmd("ls", "-1", RDMA_CLASS)))


def table_sections(plan: FactPlan) -> list[Read]:
    """Every GID table, and every netplan file, when the plan asks them."""
    return [*([(GID_TABLE_SECTION, GID_TABLE_COMMAND)] if plan.gid_tables else []),
            *([(NETPLAN_SECTION, NETPLAN_FILES_COMMAND)] if plan.netplan_files else [])]


def gid_files(plan: FactPlan) -> list[FileRead]:
    """The GID and GID type at the plan's index, of port 1 of each HCA."""
    out: list[FileRead] = []
    for hca in plan.hcas:
        port, index = f"{RDMA_CLASS}/{hca}/ports/1", plan.gid_index
        out += [(f"gid:{hca}", (f"{port}/gids/{index}",)),
                (f"gidtype:{hca}", (f"{port}/gid_attrs/types/{index}",))]
    return out


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The fabric's `NodeFacts` fields."""
    gids = {hca: Gid(gid=r.parse(f"gid:{hca}", parse_single_line, quiet=True),
                     type=r.parse(f"gidtype:{hca}", parse_single_line, quiet=True)) for hca in plan.hcas}
    return {
        "interfaces": r.parse("ip-addr", parse_ip_addr_json) or {},
        "rdma_devices": r.parse("rdma", parse_ls, quiet=True) or (),
        "gids": gids,
        "gid_table": (r.parse(GID_TABLE_SECTION, parse_gid_table) or ()) if plan.gid_tables else (),
        "netplan_files": r.parse(NETPLAN_SECTION, parse_netplan_listing) if plan.netplan_files else None,
    }
