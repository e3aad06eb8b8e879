"""Writes and reads on a node never follow a link (issue 20, point 4).

- The facts a write decides on (`file_states`) and a diff reads (`file_texts`) answer what is at
  the path itself: a symbolic link is reported with where it points, as text, and its
  target is never read; a directory or a FIFO is named by its kind.
- `refusal` names the path and what is there; `file` and `upload` refuse before any command,
  so nothing is written and the ownership record is untouched; a file written is recorded
  only after the command that moved it into place.
- `atomic_upload`'s commands, run for real through pyinfra's `@local` connector in a temp
  directory: the upload lands in a directory `mkdir` made (so it is exclusive, under a name
  nobody could guess), a link planted at any name an upload used to take is never written
  through, and a directory or a link at the target stops the commands before the move.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from io import BytesIO
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyinfra.api.command import FileUploadCommand, StringCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.context import ctx_host, ctx_state

from sparkbase.deploy.node import read_node, use_facts
from sparkbase.deploy.operations.base import atomic_upload, refusal, remove_leftovers
from sparkbase.deploy.operations.files import directory, file, upload
from sparkbase.deploy.operations.memory import NotSparkbases, decide_swap_file, exact_text
from sparkbase.facts.model import FileInfo, Found, NodeFacts
from sparkbase.facts.parsers.files import parse_file_info, parse_file_text
from sparkbase.facts.parsers.ownership import parse_owned
from sparkbase.facts.script import FactPlan
from sparkbase.facts.state import (
    LEFTOVER,
    LINK,
    MISSING,
    NOT_A_FILE,
    OTHER,
    TEMP_SUFFIX,
    TEXT_FOLLOWS,
    UNREAD,
    file_state_command,
    file_text_command,
    ownership_command,
)
from sparkbase.model.ownership import OWNERSHIP_DIR, OwnershipRecord, RecordUnreadable

SECRET = "root:$6$linksafe-secret-hash:19000:0:99999:7:::"
CONTENT = "NCCL_IB_HCA=rocep1s0f0\n"
SHA = hashlib.sha256(CONTENT.encode()).hexdigest()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file standing for /etc/shadow: mode 0640, holding a secret string."""
    path = tmp_path / "shadow"
    path.write_text(SECRET + "\n")
    path.chmod(0o640)
    return path


def _raw(local: Any, command: Any, path: Path) -> str:
    """What the node prints for the section `command` of `path` (as one text)."""
    status, output = local.run_shell_command(StringCommand(command(str(path))))
    assert status
    return "\n".join(output.stdout_lines)


def _found(path: Path) -> FileInfo:
    """What is at `path`, which must be something."""
    found = _state(path)
    assert found is not None
    return found


def _state(path: Path) -> FileInfo | None:
    """What is at `path`, read as plan reads it (the fact script over pyinfra)."""
    return read_node(FactPlan(core_only=True, file_states=(str(path),))).file_states[str(path)]


def _text(path: Path) -> str | None:
    """The text at `path`, read as plan reads it for a diff."""
    return read_node(FactPlan(core_only=True, file_texts=(str(path),))).file_texts[str(path)]


# --- reads --------------------------------------------------------------------------------


def test_a_symlinked_file_reads_as_a_link_and_its_target_is_never_read(
    local: Any, tmp_path: Path, secret: Path
) -> None:
    link = tmp_path / "nccl.conf"
    link.symlink_to(secret)
    state = _state(link)
    assert state == FileInfo(0, "", False, Found.SYMLINK, str(secret))
    assert _text(link) is None
    for command in (file_state_command, file_text_command):
        raw = _raw(local, command, link)
        assert SECRET not in raw and base64.b64encode(SECRET.encode()).decode()[:20] not in raw
    assert hashlib.sha256(secret.read_bytes()).hexdigest() not in _raw(local, file_state_command, link)


def test_a_dangling_link_is_still_a_link(local: Any, tmp_path: Path) -> None:
    link = tmp_path / "nccl.conf"
    link.symlink_to(tmp_path / "nowhere")
    assert _found(link).found is Found.SYMLINK
    assert _text(link) is None


def test_a_directory_and_a_fifo_are_named_by_their_kind(local: Any, tmp_path: Path) -> None:
    directory = tmp_path / "nccl.conf"
    directory.mkdir()
    (directory / "inside").write_text(SECRET)
    fifo = tmp_path / "fifo.conf"
    os.mkfifo(fifo)
    directory.chmod(0o750)
    directory_found = FileInfo(0o750, "", False, Found.DIRECTORY, "directory")
    assert _state(directory) == directory_found
    assert _state(fifo) == FileInfo(0, "", False, Found.OTHER, "fifo")
    for path in (directory, fifo):
        assert _text(path) is None


def test_a_regular_file_reads_as_before(local: Any, tmp_path: Path) -> None:
    path = tmp_path / "nccl.conf"
    path.write_text(CONTENT)
    path.chmod(0o644)
    assert _state(path) == FileInfo(0o644, SHA)
    assert _text(path) == CONTENT
    assert _state(tmp_path / "absent") is None


def _interrupted(path: Path, shape: str) -> None:
    """What an upload cut short leaves: 0.4.1's file, or this version's directory and upload."""
    if shape == TEMP_SUFFIX:
        Path(f"{path}{shape}").write_text("half")
        return
    Path(f"{path}{shape}").mkdir(mode=0o700)
    Path(f"{path}{shape}/new").write_text("half")


@pytest.mark.parametrize("left", [TEMP_SUFFIX, TEMP_SUFFIX + ".0123456789abcdef"])
def test_an_interrupted_upload_of_either_shape_is_seen_and_removed(local: Any, tmp_path: Path,
                                                                   left: str) -> None:
    path = tmp_path / "nccl.conf"
    path.write_text(CONTENT)
    _interrupted(path, left)
    assert _found(path).leftover
    assert local.run_shell_command(remove_leftovers(str(path)))[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nccl.conf"]
    assert not _found(path).leftover


def test_what_is_not_sparkbases_at_a_temp_name_is_kept(local: Any, tmp_path: Path) -> None:
    """Destroy only what you own: a link, a directory holding someone's file, a file of
    another name at the temp names is neither a leftover nor removed (it blocks nothing:
    each upload makes a new random directory)."""
    path = tmp_path / "nccl.conf"
    path.write_text(CONTENT)
    Path(f"{path}{TEMP_SUFFIX}").symlink_to(tmp_path / "elsewhere")
    theirs = Path(f"{path}{TEMP_SUFFIX}.fedcba9876543210")
    theirs.mkdir()
    (theirs / "notes").write_text("keep me")
    (theirs / "new").write_text("keep me too")
    Path(f"{path}{TEMP_SUFFIX}.bak").write_text("keep")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert not _found(path).leftover
    assert local.run_shell_command(remove_leftovers(str(path)))[0]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("lines,found", [
    ([LINK, base64.b64encode(b"/etc/shadow").decode()], FileInfo(0, "", False, Found.SYMLINK, "/etc/shadow")),
    ([LINK, base64.b64encode(b"a\nb").decode(), LEFTOVER], FileInfo(0, "", True, Found.SYMLINK, "a\nb")),
    ([OTHER, "directory", "700"], FileInfo(0o700, "", False, Found.DIRECTORY, "directory")),
    ([OTHER, "character special file"], FileInfo(0, "", False, Found.OTHER, "character special file")),
    ([MISSING], None),
    (["644", SHA + "  /etc/nccl.conf", LEFTOVER], FileInfo(0o644, SHA, True)),
])
def test_file_state_answers_parse(lines: list[str], found: FileInfo | None) -> None:
    assert parse_file_info("".join(f"{line}\n" for line in lines)) == found


def test_a_linked_ownership_record_is_neither_read_nor_trusted() -> None:
    command = ownership_command()
    assert command.index("[ -L") < command.index("cat ")
    with pytest.raises(RecordUnreadable, match="symbolic link"):
        parse_owned(f"{NOT_A_FILE}\n")


# --- decisions ------------------------------------------------------------------------------


@pytest.mark.parametrize("info,expected", [
    (FileInfo(0, "", False, Found.SYMLINK, "/etc/shadow"),
     "/etc/nccl.conf is a symbolic link to '/etc/shadow'"),
    (FileInfo(0, "", False, Found.DIRECTORY, "directory"), "/etc/nccl.conf is a directory"),
    (FileInfo(0, "", False, Found.OTHER, "fifo"), "/etc/nccl.conf is a fifo"),
    (FileInfo(0, "", False, Found.SYMLINK, "x\n/proc/cmdline"),
     "/etc/nccl.conf is a symbolic link to 'x\\n/proc"),
])
def test_a_refusal_names_the_path_and_what_is_there(info: FileInfo, expected: str) -> None:
    reason = refusal("/etc/nccl.conf", info)
    assert reason is not None and reason.startswith(expected) and "nothing was written" in reason
    assert "\n" not in reason


@pytest.mark.parametrize("info", [None, FileInfo(0o644, SHA)])
def test_nothing_or_a_regular_file_is_written(info: FileInfo | None) -> None:
    assert refusal("/etc/nccl.conf", info) is None


def test_the_fstab_editor_keeps_a_linked_fstab() -> None:
    reason = exact_text(None, FileInfo(0, "", False, Found.SYMLINK, "/etc/shadow"))
    assert reason is not None and "/etc/fstab is a symbolic link to '/etc/shadow'" in reason


def test_a_link_at_the_swap_path_is_refused_by_name() -> None:
    link = {"size": 11, "mode": 0o777, "header_page_size": None, "kind": "symbolic link"}
    with pytest.raises(NotSparkbases, match="/swapfile is a symbolic link"):
        decide_swap_file("/swapfile", 1, 4096, link, None, False, OwnershipRecord(), "u")


class FakeHost:
    """What an operation's body needs of a host: a name and `noop`."""

    name = "spark1"

    def noop(self, reason: str) -> None:
        self.reason = reason


def node_with(path: str, found: FileInfo | None) -> NodeFacts:
    """A node where `found` is at `path` (and sparkbase recorded nothing)."""
    return NodeFacts("spark1", containers={}, file_states={path: found}, file_texts={path: None},
                     ownership=OwnershipRecord())


def _run_op(op: Any, facts: NodeFacts, **kwargs: Any) -> list[Any]:
    """The commands an operation's body yields on a node with `facts` (as pyinfra adds it)."""
    state = SimpleNamespace(config=SimpleNamespace(DIFF=False), is_executing=False)
    # pyinfra's `use` does not put the old host back when the body raises: do it here
    old_state, old_host = ctx_state.get(), ctx_host.get()  # type: ignore[no-untyped-call]
    try:
        with ctx_state.use(state), ctx_host.use(FakeHost()):
            use_facts(facts)
            return list(op._inner(**kwargs))
    finally:
        ctx_state.set(old_state)  # type: ignore[no-untyped-call]
        ctx_host.set(old_host)  # type: ignore[no-untyped-call]


def _shell(commands: list[Any]) -> list[str]:
    return [c.get_raw_value() if isinstance(c, StringCommand) else f"upload {c.dest}" for c in commands]


@pytest.mark.parametrize("found", [
    FileInfo(0, "", False, Found.SYMLINK, "/etc/shadow"),
    FileInfo(0, "", False, Found.DIRECTORY, "directory"),
])
@pytest.mark.parametrize("op,kwargs", [
    (file, {"content": CONTENT}),
    (upload, {"local": "/dev/null"}),
])
def test_a_refused_write_yields_no_command_and_records_nothing(found: FileInfo, op: Any,
                                                                 kwargs: dict[str, Any]) -> None:
    with pytest.raises(OperationError, match=r"^/etc/nccl\.conf is a"):
        _run_op(op, node_with("/etc/nccl.conf", found), path="/etc/nccl.conf", mode=0o644,
                sha256=SHA, baseline="site", **kwargs)


def test_a_link_or_file_where_a_directory_belongs_is_refused_and_not_recorded() -> None:
    """A link (or a file) where a directory belongs: `install -d` would change the mode of the
    link's target, and the record would claim it."""
    mok = "/var/lib/shim-signed/mok"
    for found in (FileInfo(0, "", False, Found.SYMLINK, "/etc"), FileInfo(0o600, SHA)):
        with pytest.raises(OperationError, match="/var/lib/shim-signed/mok exists and is not a directory"):
            _run_op(directory, node_with(mok, found), path=mok, mode=0o700, baseline="site")
    assert _run_op(directory, node_with(mok, FileInfo(0o700, "", False, Found.DIRECTORY, "directory")),
                   path=mok, mode=0o700, baseline="site") == []


def test_a_read_that_met_a_link_after_the_test_gives_no_text() -> None:
    assert parse_file_text(f"{TEXT_FOLLOWS}\n{UNREAD}\n") is None
    assert parse_file_text(f"{LINK}\n{base64.b64encode(b'/etc/shadow').decode()}\n") is None


def test_a_new_file_is_recorded_only_after_it_is_moved_into_place() -> None:
    shell = _shell(_run_op(file, node_with("/etc/nccl.conf", None), path="/etc/nccl.conf",
                           content=CONTENT, mode=0o644, sha256=SHA, baseline="site"))
    moved = next(i for i, line in enumerate(shell) if re.search(r"mv -T -f -- \S+ /etc/nccl.conf$", line))
    recorded = next(i for i, line in enumerate(shell) if OWNERSHIP_DIR in line)
    assert moved < recorded, shell
    assert shell[recorded].startswith(f"if [ -L {OWNERSHIP_DIR} ]"), shell


# --- writes, run for real -------------------------------------------------------------------


def test_the_upload_goes_into_a_fresh_directory_and_moves_in_with_mv_t() -> None:
    first = _shell(list(atomic_upload(BytesIO(b"x"), "/etc/nccl.conf", 0o644, SHA)))
    second = _shell(list(atomic_upload(BytesIO(b"x"), "/etc/nccl.conf", 0o644, SHA)))
    temp = re.fullmatch(r"mkdir -m 700 -- (/etc/nccl\.conf\.sparkbase-new\.[0-9a-f]{16})", first[2])
    assert temp is not None, first
    assert first[0].startswith("if [ -L /etc/nccl.conf ]")
    assert first[1].startswith("for left in /etc/nccl.conf.sparkbase-new /etc/nccl.conf.sparkbase-new.*;")
    assert first[3] == f"upload {temp[1]}/new"
    assert first[-2].endswith(f"mv -T -f -- {temp[1]}/new /etc/nccl.conf")
    assert first[-2].startswith("if [ -L /etc/nccl.conf ]")
    assert first[-1] == f"rmdir -- {temp[1]}"
    assert first[2] != second[2], "the temp name is not guessable"
    assert not any(re.search(r"\bmv -f\b", line) for line in first)


def _execute(local: Any, commands: list[Any]) -> bool:
    """Run the commands on the `@local` host as pyinfra runs an operation's commands: in
    order, stopping at the first that fails."""
    for command in commands:
        if isinstance(command, FileUploadCommand):
            try:
                local.put_file(command.src, command.dest)
            except OSError:
                return False
        elif not local.run_shell_command(command)[0]:
            return False
    return True


def _untouched(path: Path) -> tuple[str, int]:
    return path.read_text(), path.stat().st_mode


def test_links_planted_at_any_temp_name_are_never_written_through(local: Any, tmp_path: Path,
                                                                   secret: Path) -> None:
    target = tmp_path / "nccl.conf"
    before = _untouched(secret)
    # 0.4.1's fixed temp name, and names in the new temp directories' shape
    for name in (TEMP_SUFFIX, TEMP_SUFFIX + ".0123456789abcdef", TEMP_SUFFIX + ".x"):
        (tmp_path / f"nccl.conf{name}").symlink_to(secret)
    assert _execute(local, list(atomic_upload(BytesIO(CONTENT.encode()), str(target), 0o644, SHA)))
    assert target.read_text() == CONTENT and not target.is_symlink()
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    assert _untouched(secret) == before
    shapes = (TEMP_SUFFIX, TEMP_SUFFIX + ".0123456789abcdef", TEMP_SUFFIX + ".x")
    planted = [f"nccl.conf{name}" for name in shapes]
    # the planted links are not sparkbase's: kept as they were, never followed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["nccl.conf", "shadow", *planted])
    assert all(os.readlink(tmp_path / name) == str(secret) for name in planted)


def test_a_directory_at_the_target_stops_the_write_and_swallows_nothing(local: Any, tmp_path: Path) -> None:
    target = tmp_path / "nccl.conf"
    target.mkdir()
    (target / "inside").write_text("kept\n")
    assert not _execute(local, list(atomic_upload(BytesIO(CONTENT.encode()), str(target), 0o644, SHA)))
    assert [p.name for p in target.iterdir()] == ["inside"]
    assert (target / "inside").read_text() == "kept\n"


def test_a_link_at_the_target_stops_the_write_before_anything_is_made(local: Any, tmp_path: Path,
                                                                       secret: Path) -> None:
    target = tmp_path / "nccl.conf"
    target.symlink_to(secret)
    before = _untouched(secret)
    assert not _execute(local, list(atomic_upload(BytesIO(CONTENT.encode()), str(target), 0o644, SHA)))
    assert target.is_symlink() and _untouched(secret) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nccl.conf", "shadow"]


def test_mv_t_never_moves_into_a_directory_even_past_the_guard(local: Any, tmp_path: Path) -> None:
    """The last line of defence when a directory appears between the guard and the move."""
    target = tmp_path / "nccl.conf"
    target.mkdir()
    new = tmp_path / "new"
    new.write_text(CONTENT)
    commands = list(atomic_upload(BytesIO(b""), str(target), 0o644, None))
    temp = commands[2].get_raw_value().split()[-1]
    move = commands[-2].get_raw_value().rsplit("; ", 1)[1].replace(f"{temp}/new", str(new))
    assert move.startswith("mv -T ")
    assert not local.run_shell_command(StringCommand(move))[0]
    assert list(target.iterdir()) == [] and new.exists()


def test_the_reads_still_work_in_one_round_trip(local: Any, tmp_path: Path, secret: Path) -> None:
    """File states and texts read by the one fact script (one round trip, each fenced), as
    `plan` reads them: the link is reported, its target never read."""
    (tmp_path / "reg").write_text(CONTENT)
    (tmp_path / "link").symlink_to(secret)
    (tmp_path / "dir").mkdir()
    paths = tuple(str(tmp_path / name) for name in ("reg", "link", "dir", "none"))
    facts = read_node(FactPlan(core_only=True, file_states=paths, file_texts=paths))
    assert [facts.file_texts[path] for path in paths] == [CONTENT, None, None, None]
    kinds = [Found.REGULAR, Found.SYMLINK, Found.DIRECTORY, None]
    states = [facts.file_states[path] for path in paths]
    assert [info.found if info else None for info in states] == kinds
    link = states[1]
    assert link is not None and link.detail == str(secret)
