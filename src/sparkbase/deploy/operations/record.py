"""The ownership record on the node: read live once the commands that created or removed
something ran (`node.owned_record`), then written atomically."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from io import BytesIO
from typing import Any

from pyinfra.api.command import StringCommand

from sparkbase.deploy.node import owned_record
from sparkbase.deploy.operations.base import atomic_upload, cmd, guard_directory
from sparkbase.model.ownership import OWNERSHIP_DIR, OWNERSHIP_PATH, Kind, OwnedItem, OwnershipRecord


def write_record(record: OwnershipRecord) -> Any:
    """Write `record` as the node's ownership record (never through a link: `atomic_upload`)."""
    data = record.to_json().encode()
    yield StringCommand(f"{guard_directory(OWNERSHIP_DIR)}; "
                        f"{cmd('install', '-d', '-m', '700', '--', OWNERSHIP_DIR).get_raw_value()}")
    yield from atomic_upload(BytesIO(data), OWNERSHIP_PATH, 0o600, hashlib.sha256(data).hexdigest())


def remember(*items: OwnedItem, only_if_recorded: bool = False) -> Any:
    """Record `items` as created by sparkbase (with `only_if_recorded`: update them only where
    the record already holds them, e.g. a file sparkbase rewrote but did not create)."""
    record = owned_record()
    if only_if_recorded:
        items = tuple(item for item in items if record.find(item.kind, item.target) is not None)
    if items:
        yield from write_record(record.with_items(items))


def forget(keys: Iterable[tuple[Kind, str]]) -> Any:
    """Drop removed items from the record."""
    record = owned_record()
    updated = record.without(keys)
    if updated != record:
        yield from write_record(updated)
