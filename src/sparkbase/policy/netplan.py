"""One netplan file configures the fabric ports, never two: what apply may write, refuses, or
puts back.

netplan merges all its files (`facts.parsers.fabric`): a port two files configure carries
both files' addresses, and two paths then share a subnet. So the fabric's interfaces are
configured in one file only: sparkbase's own `/etc/netplan/60-sparkbase-fabric.yaml`, or the
site's file the baseline names (`fabric.netplan_file`), which sparkbase then takes over.

- `decide_netplan_files` looks at every netplan file as the apply will leave it and refuses
  (`refusal`, nothing written) while another file configures a fabric port, naming the
  interfaces, both files and the ways out; a file that does not parse, or that matches by MAC
  address or driver, may configure anything and is refused the same way. Before judging, it
  puts back what sparkbase itself changed in files it no longer manages the fabric in: its own
  60-sparkbase-fabric.yaml is removed (recorded, unchanged) when the fabric moved to the site's
  file, and a site file sparkbase took over is given back its recorded text (only while it is
  exactly as sparkbase wrote it; otherwise it is kept and reported).
- `decide_takeover` rewrites the fabric's interfaces in the site's file (`merge_fabric`: a
  ruamel.yaml round trip, so every other key, comment and the file's indentation stay as the
  site wrote them; in each fabric interface only the keys sparkbase sets change, and only where
  their meaning differs: `dhcp4: no` is already false), recording the file's text and mode as
  found (`policy.ownership` kind `edited-file`).

Pure: the node's netplan files and ownership record in, decisions out; no host, no pyinfra.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from io import StringIO

from sparkbase.facts.model import NetplanListing, NetplanSource
from sparkbase.facts.parsers.fabric import (
    MAX_NETPLAN_FILES,
    Fabric,
    NetplanConfig,
    effective_sources,
    ethernet_settings,
    fabric_differences,
    found_settings,
    load_netplan_yaml,
    netplan_config,
    parse_netplan_yaml,
    wanted_settings,
)
from sparkbase.model.netplan import NETPLAN_DIRS, SITE_NETPLAN_DIR, SPARKBASE_NETPLAN_PATH
from sparkbase.model.ownership import Kind, OwnedItem, OwnershipRecord, edited_file
from sparkbase.policy.ownership import KEPT


def sha256_text(text: str) -> str:
    """sha256 of `text` as written (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names)


# --- who else configures the fabric ports -------------------------------------------------------


@dataclass(frozen=True)
class Clash:
    """Another netplan file that configures fabric interfaces (or may: it does not parse)."""

    path: str
    interfaces: tuple[str, ...]
    #: how it configures them (the definitions), or why it may configure anything
    how: str
    #: it could not be read or parsed, so which interfaces it configures is unknown
    unknown: bool = False


@dataclass(frozen=True)
class Restore:
    """A site file put back as sparkbase found it."""

    path: str
    text: str
    mode: int


@dataclass(frozen=True)
class NetplanFilesDecision:
    """What apply does about the node's netplan files before writing the fabric's: refuse
    (`refusal`), remove sparkbase's own file it no longer uses, put site files back; the record
    entries to forget once done; notes on what is kept; why nothing is done (`reason`)."""

    refusal: str | None = None
    remove: tuple[str, ...] = ()
    restore: tuple[Restore, ...] = ()
    forget: tuple[tuple[Kind, str], ...] = ()
    notes: tuple[str, ...] = ()
    reason: str = ""

    @property
    def changes(self) -> bool:
        """Whether apply writes anything for it (files or the record)."""
        return bool(self.remove or self.restore or self.forget)


@dataclass
class _After:
    """The netplan files as the apply will leave them, and what it does to get there."""

    files: dict[str, NetplanSource]
    remove: list[str] = field(default_factory=list)
    restore: list[Restore] = field(default_factory=list)
    forget: list[tuple[Kind, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _retire_own_file(after: _After, own: str, record: OwnershipRecord) -> None:
    """sparkbase's own fabric file, once the fabric is managed in the site's: removed when
    sparkbase wrote it and it is unchanged; otherwise kept (and judged like any other file)."""
    if own == SPARKBASE_NETPLAN_PATH or SPARKBASE_NETPLAN_PATH not in after.files:
        return
    found = after.files[SPARKBASE_NETPLAN_PATH]
    owned = record.find(Kind.FILE, SPARKBASE_NETPLAN_PATH)
    if owned is None:
        after.notes.append(f"{KEPT}{SPARKBASE_NETPLAN_PATH} was not written by sparkbase: left in place")
    elif found.link or found.sha256 != owned.sha256:
        after.notes.append(f"{KEPT}{SPARKBASE_NETPLAN_PATH} changed since sparkbase wrote it: left in place")
    else:
        after.remove.append(SPARKBASE_NETPLAN_PATH)
        after.forget.append((Kind.FILE, SPARKBASE_NETPLAN_PATH))
        del after.files[SPARKBASE_NETPLAN_PATH]


def _give_back(after: _After, own: str, record: OwnershipRecord) -> None:
    """Site files sparkbase took over and manages the fabric in no more: their recorded text
    back while each is exactly as sparkbase wrote it; otherwise kept and reported."""
    for item in record.items:
        if item.kind is not Kind.EDITED_FILE or item.target == own:
            continue
        found = after.files.get(item.target)
        if found is None:
            after.notes.append(f"{item.target} (taken over by {item.baseline}) is gone: nothing to put back")
            after.forget.append((Kind.EDITED_FILE, item.target))
        elif found.link or found.sha256 != item.sha256 or item.original is None:
            after.notes.append(f"{KEPT}{item.target} changed since sparkbase wrote it (taken over by "
                               f"{item.baseline}): not put back, left in place as it is")
        else:
            mode = item.mode if item.mode is not None else 0o600
            after.restore.append(Restore(item.target, item.original, mode))
            after.forget.append((Kind.EDITED_FILE, item.target))
            after.files[item.target] = NetplanSource(item.target, item.original, sha256_text(item.original),
                                                     mode)


def clashes_of(source: NetplanSource, interfaces: Sequence[str]) -> Clash | None:
    """How `source` configures any of `interfaces` (or may: it cannot be read or parsed, or it
    matches by MAC address or driver), or None."""
    if source.text is None:
        return Clash(source.path, tuple(interfaces), source.problem or "not read", unknown=True)
    try:
        config = parse_netplan_yaml(source.text)
    except ValueError as exc:
        return Clash(source.path, tuple(interfaces), f"does not parse: {exc}", unknown=True)
    return _clash_in(source.path, config, interfaces)


def _clash_in(path: str, config: NetplanConfig, interfaces: Sequence[str]) -> Clash | None:
    unnamed = config.unnamed()
    if unnamed:
        names = _listed([f"{netdef.kind}.{netdef.id}" for netdef in unnamed])
        return Clash(path, tuple(interfaces), f"{names} match by MAC address or driver, so which interfaces "
                     "they configure cannot be told", unknown=True)
    hits = {interface: config.configuring(interface) for interface in interfaces}
    named = tuple(interface for interface, netdefs in hits.items() if netdefs)
    if not named:
        return None
    how = _listed(list(dict.fromkeys(netdef.how(interface)
                                     for interface in named for netdef in hits[interface])))
    return Clash(path, named, how)


def decide_netplan_files(
    own: str, interfaces: Sequence[str], listing: NetplanListing, record: OwnershipRecord
) -> NetplanFilesDecision:
    """Whether `own` (the fabric's netplan file) may configure `interfaces` alone once the
    apply has put back what sparkbase changed elsewhere; refused (nothing written) otherwise."""
    after = _After({source.path: source for source in listing.sources})
    _retire_own_file(after, own, record)
    _give_back(after, own, record)
    read = effective_sources(after.files.values())
    name = posixpath.basename(own)
    shadow = next((source for source in read if source.name == name and source.path != own), None)
    clashes = tuple(clash for source in read if source.path != own
                    if (clash := clashes_of(source, interfaces)) is not None)
    notes = tuple(after.notes)
    refusal = _refusal(own, shadow, clashes, listing.more, notes)
    if refusal is not None:
        return NetplanFilesDecision(refusal=refusal, notes=notes)
    reason = "; ".join(notes) if notes and not (after.remove or after.restore or after.forget) else \
        f"only {own} configures the fabric ports ({len(read)} netplan file(s) read)"
    return NetplanFilesDecision(remove=tuple(after.remove), restore=tuple(after.restore),
                                forget=tuple(after.forget), notes=notes, reason=reason)


def _way_out(own: str, clash: Clash) -> str:
    """What the operator can do about one clash."""
    names = _listed(clash.interfaces)
    if clash.unknown:
        return (f"{clash.path} {clash.how}: sparkbase cannot tell which interfaces it configures, so it "
                f"may configure {names}; fix or remove it by hand")
    what = f"{clash.path} configures {names} too ({clash.how})"
    if own != SPARKBASE_NETPLAN_PATH:
        return (f"{what}: the fabric is managed in {own} (fabric.netplan_file); remove {names} from "
                f"{clash.path} by hand")
    if posixpath.dirname(clash.path) == SITE_NETPLAN_DIR:
        return (f"{what}: set `fabric.netplan_file: {clash.path}` in the baseline to have sparkbase manage "
                f"the fabric in that file, or remove {names} from {clash.path} by hand")
    if posixpath.dirname(clash.path) == NETPLAN_DIRS[0]:
        return (f"{what}: remove {names} from it by hand, or shadow it with a file of the same name in "
                f"{SITE_NETPLAN_DIR} that leaves them out")
    return f"{what}: it is written at run time; stop what writes it, or remove {names} from it by hand"


def _refusal(own: str, shadow: NetplanSource | None, clashes: tuple[Clash, ...], more: bool,
             notes: tuple[str, ...]) -> str | None:
    """The one-line refusal, or None when `own` alone configures the fabric ports."""
    problems: list[str] = []
    if shadow is not None:
        problems.append(f"{own} is shadowed by {shadow.path} (netplan reads only the one in the later "
                        f"directory); remove {shadow.path} by hand")
    if more:
        problems.append(f"the netplan directories hold more than {MAX_NETPLAN_FILES} files: sparkbase "
                        "read only the first, so any other may configure the fabric ports")
    problems += [_way_out(own, clash) for clash in clashes]
    if not problems:
        return None
    kept = f" ({'; '.join(notes)})" if notes else ""
    return (f"the fabric's netplan file {own} must be the only one configuring the fabric ports (netplan "
            f"merges its files: a port two files configure carries both files' addresses); nothing was "
            f"written. {'; '.join(problems)}; then apply again{kept}")


# --- taking the site's file over ----------------------------------------------------------------


@dataclass(frozen=True)
class TakeoverDecision:
    """The site file's new text (None: nothing to write, `reason` says why), or why it is
    refused; and the record of the edit to keep once written (None: keep the record as it is)."""

    text: str | None = None
    reason: str = ""
    refusal: str | None = None
    record: OwnedItem | None = None


def decide_takeover(path: str, fabric: Fabric, source: NetplanSource | None, record: OwnershipRecord,
                    baseline: str, when: str) -> TakeoverDecision:
    """The site's netplan file `path` with the fabric's interfaces as the baseline sets them:
    unchanged when it already says the same; the first rewrite recorded with the text as
    found; a later one updates what the record says sparkbase wrote only while the file is as
    sparkbase last wrote it (a file someone changed since is not put back on move-back)."""
    problem = _untakeable(path, source)
    if problem is not None:
        return TakeoverDecision(refusal=f"{path} {problem}; nothing was written")
    assert source is not None and source.text is not None
    try:
        data = load_netplan_yaml(source.text)
        inside = _inside_clash(path, netplan_config(data), fabric)
    except ValueError as exc:
        return TakeoverDecision(refusal=f"{path} does not parse ({exc}): sparkbase does not rewrite a "
                                        "file it cannot read; fix it by hand; nothing was written")
    if inside is not None:
        return TakeoverDecision(refusal=inside)
    keys = sorted({key for settings in fabric.values() for key in settings})
    differences = fabric_differences(ethernet_settings(data, list(fabric), keys), fabric)
    if not differences:
        return TakeoverDecision(reason=f"{path} configures the {len(fabric)} fabric ports as the "
                                       "baseline does")
    text = merge_fabric(source.text, fabric)
    if fabric_differences(found_settings(text, fabric), fabric):  # pragma: no cover - merge_fabric's contract
        return TakeoverDecision(refusal=f"{path}: the merged file does not read back as the baseline's "
                                        "fabric; nothing was written")
    return TakeoverDecision(text=text, reason="; ".join(differences),
                            record=_edit_record(path, source, text, record, baseline, when))


def _untakeable(path: str, source: NetplanSource | None) -> str | None:
    if source is None:
        return (f"does not exist on the node: fabric.netplan_file names the site's own netplan file that "
                f"configures the fabric; create it, or unset fabric.netplan_file to have sparkbase write "
                f"{SPARKBASE_NETPLAN_PATH}")
    if source.link:
        return "is a symbolic link: sparkbase never writes through one; put the file itself there"
    if source.text is None:
        return f"cannot be taken over: {source.problem}"
    return None


def _inside_clash(path: str, config: NetplanConfig, fabric: Fabric) -> str | None:
    """A definition of the site's file, other than `ethernets.NETDEV`, that configures a fabric
    port (by `match:`, `set-name:`, as a bond member) or may (by MAC address or driver)."""
    for netdev in fabric:
        for netdef in config.configuring(netdev):
            if (netdef.kind, netdef.id) != ("ethernets", netdev):
                return (f"{path} configures {netdev} through {netdef.how(netdev)}: sparkbase manages each "
                        f"fabric port as network.ethernets.{netdev}; rename or remove that definition by "
                        "hand; nothing was written")
    unnamed = config.unnamed()
    if unnamed:
        return (f"{path}: {unnamed[0].kind}.{unnamed[0].id} matches by MAC address or driver, so it may "
                "configure a fabric port; give it a name (match: name:, set-name:) by hand; nothing was "
                "written")
    return None


def _edit_record(path: str, source: NetplanSource, text: str, record: OwnershipRecord, baseline: str,
                 when: str) -> OwnedItem | None:
    owned = record.find(Kind.EDITED_FILE, path)
    if owned is None:
        assert source.text is not None
        return edited_file(path, baseline, when, original=source.text, mode=source.mode or 0o600,
                           sha256=sha256_text(text))
    if owned.sha256 != source.sha256:
        return None  # changed by someone since sparkbase wrote it: never put back whole
    return owned.model_copy(update={"sha256": sha256_text(text), "baseline": baseline, "recorded_at": when})


# --- the merge ----------------------------------------------------------------------------------


def _mapping_indent(text: str) -> int:
    """How far the file indents a nested mapping: the least indentation of a key line below a
    top-level key (2 when there is none)."""
    indents = [len(line) - len(line.lstrip(" ")) for line in text.split("\n")
               if line.strip() and not line.lstrip(" ").startswith(("#", "-"))]
    nested = [indent for indent in indents if indent > 0]
    return min(nested) if nested else 2


def merge_fabric(text: str, fabric: Fabric) -> str:
    """`text` (a netplan file) with `network.ethernets.NETDEV.KEY` set as `fabric` says, by a
    ruamel.yaml round trip: every other key, comment, blank line and the file's indentation
    (guessed from the file) stay; in each fabric interface only keys whose meaning differs are
    set (new ones after the interface's own), lists in flow style (`[10.0.0.1/24]`); a
    missing interface, `ethernets:` or `network:` is added."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.util import load_yaml_guess_indent

    load_netplan_yaml(text)  # bounded, and refuses what does not parse, before the round trip
    data, seq_indent, offset = load_yaml_guess_indent(text) if text.strip() else (None, None, None)
    mapping = _mapping_indent(text)
    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.preserve_quotes = True
    if offset is None:  # no block sequence in the file: ruamel guessed the mappings' indent
        yaml.indent(mapping=mapping, sequence=mapping, offset=0)
    else:
        yaml.indent(mapping=mapping, sequence=max(seq_indent or mapping, offset + 2), offset=offset)
    yaml.explicit_start = text.lstrip().startswith("---")
    if not isinstance(data, CommentedMap):
        data = CommentedMap()
    network = data.setdefault("network", CommentedMap())
    if network is None or not isinstance(network, CommentedMap):
        network = data["network"] = CommentedMap()
    if "version" not in network:
        network.insert(0, "version", 2)
    ethernets = network.get("ethernets")
    if not isinstance(ethernets, CommentedMap):
        ethernets = network["ethernets"] = CommentedMap()
    wanted = wanted_settings(fabric)
    for netdev, settings in fabric.items():
        current = ethernets.get(netdev)
        if not isinstance(current, CommentedMap):
            current = ethernets[netdev] = CommentedMap()
        have = ethernet_settings({"network": {"ethernets": {netdev: dict(current)}}}, [netdev],
                                 list(settings))
        for key, value in settings.items():
            if have.get(netdev, {}).get(key) == wanted[netdev][key]:
                continue
            if isinstance(value, list):
                seq = CommentedSeq(value)
                seq.fa.set_flow_style()
                current[key] = seq
            else:
                current[key] = value
    out = StringIO()
    yaml.dump(data, out)
    return out.getvalue()
