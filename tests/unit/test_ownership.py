"""The ownership record: its file format, merges, and the facts that read a node for it."""

from __future__ import annotations

import json

import pytest

from sparkbase.facts.parsers.ownership import parse_directory_entries, parse_owned, parse_swap_uuid
from sparkbase.facts.state import HASHES
from sparkbase.facts.state import MISSING as ABSENT
from sparkbase.model.ownership import (
    RECORD_FORMAT,
    Entry,
    Kind,
    OwnershipRecord,
    RecordUnreadable,
    created,
    parse_record,
)
from sparkbase.policy.ownership import Verdict, decide_identified, decide_packages

T = "2026-12-01T01:00:00Z"
SWAP = created(Kind.SWAP, "/swapfile", "site", T, uuid="0b6c3d52-8f0e-4d36-9a51-2f7f5b0c9e11")
KEY = created(Kind.FILE, "/var/lib/shim-signed/mok/MOK.priv", "variant", T, sha256="2" * 64)


def test_record_round_trips_through_its_file_with_a_format_version() -> None:
    record = OwnershipRecord().with_items([SWAP, KEY])
    text = record.to_json()
    assert json.loads(text)["format"] == RECORD_FORMAT
    assert parse_record(text) == record
    assert parse_owned(text) == record
    assert parse_owned(f"{ABSENT}\n") == OwnershipRecord()
    assert parse_record(OwnershipRecord().to_json()) == OwnershipRecord()


def test_adding_replaces_the_same_target_and_forgetting_drops_only_it() -> None:
    record = OwnershipRecord().with_items([SWAP, KEY])
    newer = created(Kind.SWAP, "/swapfile", "site", "2026-12-02T00:00:00Z",
                    uuid="7d1e4a90-2c3b-4f5e-8a6d-9b0c1d2e3f40")
    again = record.with_items([newer])
    assert len(again.items) == 2 and again.find(Kind.SWAP, "/swapfile") == newer
    assert again.find(Kind.FILE, "/swapfile") is None  # kind and target together identify an item
    assert again.without([(Kind.SWAP, "/swapfile")]).items == (KEY,)


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "is not JSON"),
    ("[1, 2]", "has no format version"),
    ('{"items": []}', "has no format version"),
    ('{"format": 4, "items": []}', "newer than this sparkbase understands"),
    ('{"format": 1, "items": [{"kind": "socket", "target": "/x", "baseline": "b", "recorded_at": "t"}]}',
     "items.0.kind"),
    ('{"format": 1, "items": [], "extra": 1}', "extra"),
])
def test_a_record_sparkbase_cannot_use_is_refused_never_trusted(text: str, message: str) -> None:
    with pytest.raises(RecordUnreadable, match=message):
        parse_record(text)


def test_identity_decides_whether_a_recorded_item_is_still_sparkbases() -> None:
    record = OwnershipRecord().with_items([SWAP])
    assert decide_identified(Kind.SWAP, "/swapfile", False, None, record).verdict is Verdict.ABSENT
    assert decide_identified(Kind.SWAP, "/swapfile", True, SWAP.uuid, record).removable
    changed = decide_identified(Kind.SWAP, "/swapfile", True, None, record)
    assert changed.verdict is Verdict.CHANGED and changed.kept_note().startswith("kept: /swapfile changed")
    assert decide_identified(Kind.SWAP, "/swap.img", True, SWAP.uuid, record).verdict is Verdict.NOT_OURS


def test_swap_uuid_parser_reads_od_output() -> None:
    assert parse_swap_uuid(" 0b 6c 3d 52 8f 0e 4d 36 9a 51 2f 7f 5b 0c 9e 11\n") == SWAP.uuid
    assert parse_swap_uuid("") is None
    assert parse_swap_uuid(" 00" * 16) is None  # no UUID written
    assert parse_swap_uuid(" 0b 6c\n") is None


def test_directory_entries_parser_keeps_odd_names_as_not_sparkbases() -> None:
    digest = "a" * 64
    lines = ["f MOK.der", "l current", "d sub", "weird-line-without-type", HASHES, f"{digest}  MOK.der",
             "\\" + digest + "  odd\\nname"]
    assert parse_directory_entries("\n".join(lines) + "\n") == (
        Entry("MOK.der", "f", digest), Entry("current", "l"), Entry("sub", "d"),
        Entry("weird-line-without-type", "?"),
    )
    assert parse_directory_entries(f"{ABSENT}\n") is None
    assert parse_directory_entries(f"{HASHES}\n") == ()


def test_packages_are_judged_on_pyinfras_sets_of_installed_versions() -> None:
    nccl = created(Kind.PACKAGE, "libnccl2", "variant", T, version="2.28.9-1")
    record = OwnershipRecord().with_items([nccl])
    installed = {"libnccl2": {"2.28.9-1"}, "nccl-site-ring4": {"2.27.7-1"}}
    names = ["libnccl2", "nccl-site-ring4", "absent"]
    verdicts = [d.verdict for d in decide_packages(names, installed, record)]
    assert verdicts == [Verdict.REMOVE, Verdict.NOT_OURS, Verdict.ABSENT]
