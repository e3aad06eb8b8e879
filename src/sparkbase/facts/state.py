"""Commands of the sections plan and apply read besides the audit's: what is at a path
sparkbase writes (never following a link), a file's text, the ownership record, a swap
header's UUID, a directory's entries, a DKMS source tree, a file packed in an initramfs.

Each is shell text from separately quoted words that always exits 0; its pure parser is
in `facts/parsers/files.py` or `facts/parsers/ownership.py`. The upload leftovers' shape
(`is_leftover`) is shared with the operations that remove them (`deploy/operations/base.py`).
"""

from __future__ import annotations

import shlex

from sparkbase.model.ownership import OWNERSHIP_PATH

#: printed when nothing is at a path
MISSING = "__sparkbase_missing__"
#: the name every upload's private temp directory starts with, beside the file it replaces
#: (`<path>.sparkbase-new.<random>`; 0.4.1 and before uploaded to `<path>.sparkbase-new`)
TEMP_SUFFIX = ".sparkbase-new"
#: the upload inside its private directory (`<path>.sparkbase-new.<hex>/new`)
TEMP_NAME = "new"
LEFTOVER = "__sparkbase_leftover__"
#: the first line of an answer about a symbolic link (its target, base64, follows)
LINK = "__sparkbase_link__"
#: the first line of an answer about something that is neither a file nor a link (`stat -c
#: %F` of it follows; for a directory, then its mode)
OTHER = "__sparkbase_other__"
#: the first line of a file text's answer for a regular file (its base64 follows)
TEXT_FOLLOWS = "__sparkbase_text__"
#: a line of a file text's answer when the file could not be read without following a link
UNREAD = "__sparkbase_unread__"
#: an initramfs answer: no image for the kernel, or the image could not be unpacked
NO_IMAGE = "__sparkbase_no_image__"
UNREADABLE = "__sparkbase_unreadable__"
#: the image was unpacked; a `sha256sum` line follows when it holds the file
UNPACKED = "__sparkbase_unpacked__"
#: printed for the record's path when a symbolic link or something not a regular file is there
NOT_A_FILE = "__sparkbase_not_a_file__"
#: separates a directory's listing from the sha256 of its files
HASHES = "__sparkbase_hashes__"
#: the swap header (format 1) keeps its 16-byte UUID at this offset
SWAP_UUID_OFFSET = 1036
#: the file apply writes into a DKMS source tree it placed: the sha256 of the tarball it
#: came from (a tree without it, or with another sha256, was not placed from that tarball)
SOURCE_STAMP = ".sparkbase-source"


def _q(value: str) -> str:
    return shlex.quote(value)


def _cmd(*argv: str) -> str:
    return " ".join(_q(arg) for arg in argv)


def leftovers_glob(path: str) -> str:
    """Shell words matching every upload an interrupted run may have left beside `path`
    (this version's private directories and 0.4.1's fixed name)."""
    temp = _q(path + TEMP_SUFFIX)
    return f"{temp} {temp}.*"


#: the name of one upload's private directory: `<path>.sparkbase-new.` and 16 hex digits
_TEMP_DIR_NAME = "*" + TEMP_SUFFIX + "." + "[0-9a-f]" * 16


def is_leftover(var: str = "left") -> str:
    """Shell test: `$var` is what an interrupted upload of sparkbase left, by its shape, and
    nothing else: 0.4.1's fixed name as a regular file, or one of this version's private
    directories (its exact name) holding nothing or only the upload. A link, a directory
    with anything else in it, or another name is not sparkbase's: it is kept, never removed."""
    v = f'"${var}"'
    return (f'{{ [ ! -L {v} ] && case {v} in *{TEMP_SUFFIX}) [ -f {v} ];; {_TEMP_DIR_NAME}) [ -d {v} ] && '
            f'[ -z "$(ls -A -- {v} | grep -vx {TEMP_NAME})" ];; *) false;; esac; }}')


def what_is_at(path: str, regular: str) -> str:
    """Shell: print what is at `path` without following a link there (a link: `LINK` and its
    target in base64; neither file nor link: `OTHER`, its kind and, for a directory, its
    mode; nothing: `MISSING`); for a regular file run `regular` instead."""
    p_ = _q(path)
    return (f"if [ -L {p_} ]; then echo {LINK}; readlink -n -- {p_} | base64; "
            f"elif [ -f {p_} ]; then {regular}; "
            f"elif [ -d {p_} ]; then echo {OTHER}; echo directory; stat -c %a -- {p_}; "
            f"elif [ -e {p_} ]; then echo {OTHER}; stat -c %F -- {p_}; "
            f"else echo {MISSING}; fi")


def file_state_command(path: str) -> str:
    """Mode and sha256 of a regular file (and whether a leftover upload is beside it); what
    else is there when it is not a regular file (a link is never followed)."""
    p_ = _q(path)
    return (what_is_at(path, f"stat -c %a -- {p_}; sha256sum -- {p_}") + "; "
            f"for left in {leftovers_glob(path)}; do "
            f"if {is_leftover()}; then echo {LEFTOVER}; break; fi; done; true")


def file_text_command(path: str) -> str:
    """A regular file's bytes, base64 (a link is never followed: the file is opened with
    O_NOFOLLOW, `dd iflag=nofollow`, so a link put there after the `[ -L ]` test fails the
    read, `UNREAD`, instead of being read through)."""
    p_ = _q(path)
    read = (f"echo {TEXT_FOLLOWS}; {{ {{ dd if={p_} iflag=nofollow,nonblock status=none "
            f"|| echo {UNREAD} >&3; }} | base64; }} 3>&1")
    return what_is_at(path, read) + "; true"


def newer_command(path: str, than: str) -> str:
    """Prints `path` when it was modified after `than` (GNU find's `-newer`, to the nanosecond)."""
    return f"{_cmd('find', path, '-maxdepth', '0', '-newer', than, '-print')} 2>/dev/null; true"


def need_reload_command(unit: str) -> str:
    """systemd's `NeedDaemonReload` of `unit`."""
    return f"{_cmd('systemctl', 'show', '-p', 'NeedDaemonReload', unit)} 2>/dev/null; true"


def initramfs_image(release: str) -> str:
    """Where Ubuntu's initramfs-tools keeps `release`'s image."""
    return f"/boot/initrd.img-{release}"


def initramfs_file_command(release: str, path: str) -> str:
    """The sha256 of `path` as packed in `release`'s initramfs, unpacked by initramfs-tools'
    own `unmkinitramfs` into a private temporary directory that is removed after. An image
    with an early (microcode) archive unpacks to `DIR/early*` and `DIR/main`, one without to `DIR`."""
    image = _q(initramfs_image(release))
    inside = [_q(f"/main{path}"), _q(path)]
    return (
        f"if [ ! -f {image} ]; then echo {NO_IMAGE}; "
        f'elif d=$(mktemp -d) && unmkinitramfs {image} "$d" >/dev/null 2>&1; then echo {UNPACKED}; '
        f'for f in {" ".join(inside)}; do if [ -f "$d$f" ]; then sha256sum "$d$f"; break; fi; done; '
        f'rm -rf -- "$d"; else echo {UNREADABLE}; [ -n "${{d:-}}" ] && rm -rf -- "$d"; fi; true'
    )


def dkms_source_command(dkms_name: str, version: str) -> str:
    """A DKMS source tree in /usr/src/NAME-VERSION: there at all, and the tarball sha256 apply
    stamped into it."""
    tree = f"/usr/src/{dkms_name}-{version}"
    stamp = _q(f"{tree}/{SOURCE_STAMP}")
    return (f"test -e {_q(tree)} && echo 'tree present'; "
            f"test -f {stamp} && printf 'stamp %s\\n' \"$(head -c 64 {stamp})\"; true")


def ownership_command() -> str:
    """The ownership record's text (`ABSENT`-like `MISSING` when there is none; `NOT_A_FILE`
    when a link or something not a regular file is there: never read through)."""
    p = _q(OWNERSHIP_PATH)
    return (f"if [ -L {p} ] || {{ [ -e {p} ] && [ ! -f {p} ]; }}; then echo {NOT_A_FILE}; "
            f"elif [ -f {p} ]; then cat {p}; else echo {MISSING}; fi")


def swap_uuid_command(path: str) -> str:
    """The 16 bytes of a swap header's UUID, as `od -An -tx1` (nothing: no regular file)."""
    p = _q(path)
    return (f"if [ -f {p} ] && [ ! -L {p} ]; then "
            f"dd if={p} bs=1 skip={SWAP_UUID_OFFSET} count=16 2>/dev/null | od -An -tx1; fi; true")


def dir_entries_command(path: str) -> str:
    """Everything inside a directory (never following links), then `HASHES` and the sha256
    of each regular file; `MISSING` when there is no directory."""
    p = _q(path)
    return (f"if [ -d {p} ] && [ ! -L {p} ]; then cd {p} && find . -mindepth 1 -printf '%y %P\\n'; "
            f"echo {HASHES}; find . -mindepth 1 -type f -printf '%P\\0' | xargs -0 -r sha256sum --; "
            f"else echo {MISSING}; fi; true")
