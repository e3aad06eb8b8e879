"""How to reach each node: SSH alias, ssh_config, known_hosts, user, timeouts, sudo.

One source of truth for sparkbase's own SSH client (`transport.client`), pyinfra and
testinfra (`transport.feeds`): the inventory's `ssh:` settings, or the emulated fleet's
files when `--lab` is given. The files are checked here, before anything connects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.boundedfile import FileRefused, Refusal, read_regular_file
from sparkbase.errors import ConfigError, Problem
from sparkbase.transport.paramiko_import import import_paramiko

if TYPE_CHECKING:
    from sparkbase.model.site import Site
    from sparkbase.model.yamlio import Location

DEFAULT_LAB_DIR = Path("/var/lib/sparkbase/lab")
#: the lab's interface for lane metrics: a node's serving stand-in listens on 127.0.0.1 at the
#: node's SSH port + this (`sparkbase_lab.lanes` starts it there; the gate reads it there)
LAB_METRICS_PORT_OFFSET = 400
#: the largest ssh_config or known_hosts read (real ones are kilobytes)
MAX_SSH_FILE_BYTES = 1024 * 1024

def lab_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The emulated fleet's state directory: `explicit`, $SPARKBASE_LAB_DIR, or the default."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("SPARKBASE_LAB_DIR")
    return Path(env) if env else DEFAULT_LAB_DIR


@dataclass(frozen=True)
class SshTarget:
    """Everything needed to open an SSH connection to one node."""

    node: str
    alias: str
    config_file: Path | None
    known_hosts: Path
    user: str
    sudo: bool
    connect_timeout: float
    #: seconds one remote command (the audit's fact script) may take in all
    command_timeout: float = 60.0
    #: seconds one command of apply that changes the node may take (`ssh.operation_timeout`)
    operation_timeout: float = 1800.0
    #: the inventory names the user (it wins over the ssh_config's User)
    user_from_inventory: bool = False


@dataclass(frozen=True)
class SshReach:
    """How the nodes are reached, as plain data: the inventory's (`reach_of`), or what
    `adopt` is given before any site exists."""

    #: node -> SSH alias, in inventory order
    aliases: dict[str, str]
    #: the inventory's ssh_config and known_hosts, resolved against the site root
    config: Path | None
    known_hosts: Path
    #: where the inventory names them (for errors about the files)
    config_at: Location
    known_hosts_at: Location
    user: str
    sudo: bool
    user_from_inventory: bool
    connect_timeout: float
    command_timeout: float
    operation_timeout: float


def reach_of(site: Site) -> SshReach:
    """The inventory's SSH settings and every node's alias."""
    settings = site.inventory.ssh
    return SshReach(
        aliases={name: node.ssh_host for name, node in site.inventory.nodes.items()},
        config=site.path(settings.config) if settings.config else None,
        known_hosts=site.path(settings.known_hosts),
        config_at=site.locate_inventory(("ssh", "config")),
        known_hosts_at=site.locate_inventory(("ssh", "known_hosts")),
        user=settings.user,
        sudo=settings.sudo,
        user_from_inventory="user" in settings.model_fields_set,
        connect_timeout=settings.connect_timeout,
        command_timeout=settings.command_timeout,
        operation_timeout=settings.operation_timeout,
    )


def ssh_targets(site: Site, lab: Path | None = None) -> dict[str, SshTarget]:
    """The SSH target of every node in the inventory (the lab's files when `lab` is set)."""
    return targets_for(reach_of(site), lab)


def targets_for(reach: SshReach, lab: Path | None = None) -> dict[str, SshTarget]:
    """The SSH target of every node `reach` names (the lab's files when `lab` is set)."""
    if lab is not None:
        config: Path | None = lab / "ssh_config"
        known_hosts = lab / "known_hosts"
    else:
        config, known_hosts = reach.config, reach.known_hosts
    _require_files(reach, lab, config, known_hosts)
    # the lab serves the inventory's user too (Lab.add_sudo_user), so --lab tests sudo paths
    return {
        name: SshTarget(
            node=name,
            alias=alias,
            config_file=config,
            known_hosts=known_hosts,
            user=reach.user,
            sudo=reach.sudo,
            user_from_inventory=reach.user_from_inventory,
            connect_timeout=reach.connect_timeout,
            command_timeout=reach.command_timeout,
            operation_timeout=reach.operation_timeout,
        )
        for name, alias in reach.aliases.items()
    }


def _require_files(reach: SshReach, lab: Path | None, config: Path | None, known_hosts: Path) -> None:
    """Refuse, as a configuration error, to connect without the files that make SSH strict,
    or with files that are not what they should be (never echoing what they hold)."""
    if lab is not None:
        if not (lab / "ssh_config").is_file() or not known_hosts.is_file():
            message = (
                f"no emulated fleet in {lab} (no ssh_config/known_hosts there): run "
                "`sparkbase lab up` first, or point --lab / $SPARKBASE_LAB_DIR at it"
            )
            raise ConfigError([Problem(lab, 1, 1, "", message)])
        lab_problems = [
            Problem(path, 1, 1, "", wrong)
            for path, check in ((lab / "ssh_config", ssh_config_problem), (known_hosts, known_hosts_problem))
            if (wrong := check(path)) is not None
        ]
        if lab_problems:
            raise ConfigError(lab_problems)
        return
    files = [
        (key, path, where, check, missing)
        for key, path, where, check, missing in (
            ("config", config, reach.config_at, ssh_config_problem,
             "does not exist: create it with one `Host <alias>` block per node "
             "(HostName, Port, User, IdentityFile), or use --lab for the emulated fleet"),
            ("known_hosts", known_hosts, reach.known_hosts_at, known_hosts_problem,
             "does not exist: enrol each node's host key by hand "
             "(README: Host keys); sparkbase never accepts an unknown host"),
        )
        if path is not None
    ]
    problems = [Problem(where.file, where.line, where.column, f"ssh.{key}", f"{path} {missing}")
                for key, path, where, _, missing in files if not path.exists()]
    if not problems:  # the files' contents only once both are there
        problems = [Problem(where.file, where.line, where.column, f"ssh.{key}", wrong)
                    for key, path, where, check, _ in files if (wrong := check(path)) is not None]
    if problems:
        raise ConfigError(problems)


def read_plain_file(path: Path) -> bytes:
    """A regular file's bytes (at most `MAX_SSH_FILE_BYTES`); `ValueError` saying what it is
    instead. A FIFO or device is refused before reading (it would hang or never end)."""
    try:
        return read_regular_file(path, MAX_SSH_FILE_BYTES)
    except FileRefused as exc:
        if exc.refusal is Refusal.NOT_REGULAR:
            raise ValueError(f"{path}: not a regular file") from None
        if exc.refusal is Refusal.TOO_BIG:
            raise ValueError(f"{path}: larger than {MAX_SSH_FILE_BYTES // 1024} KiB") from None
        raise ValueError(f"{path}: cannot open: {exc.detail}") from None


def plain_file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a small regular file, or None."""
    try:
        read_plain_file(path)
    except ValueError as exc:
        return str(exc)
    return None


def ssh_config_problem(path: Path) -> str | None:
    """Why `path` is not an OpenSSH client config paramiko can read, or None. The message
    names the file and the line, never the line's content (a wrong path may name a secret)."""
    try:
        text = read_plain_file(path).decode("utf-8")
    except UnicodeDecodeError:
        return f"{path}: not an OpenSSH client config (not UTF-8 text)"
    except ValueError as exc:
        return str(exc)
    import_paramiko()
    import paramiko

    try:
        paramiko.SSHConfig.from_text(text)
    except paramiko.ConfigParseError:
        line = _first_unparsable_line(text)
        where = f" (line {line})" if line else ""
        return f"{path}: not an OpenSSH client config{where}"
    return None


def known_hosts_problem(path: Path) -> str | None:
    """Why `path` is not an OpenSSH known_hosts file, or None. Lines paramiko cannot use are
    tolerated as OpenSSH tolerates them, unless no line holds a key or one line would stop
    paramiko's reader; the message names the line, never its content."""
    try:
        text = read_plain_file(path).decode("utf-8")
    except UnicodeDecodeError:
        return f"{path}: not an OpenSSH known_hosts file (not UTF-8 text)"
    except ValueError as exc:
        return str(exc)
    import_paramiko()
    from paramiko.hostkeys import HostKeyEntry

    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)]
    entries = [(n, line) for n, line in lines if line and not line.startswith("#")]
    usable = 0
    for number, line in entries:
        try:
            usable += HostKeyEntry.from_line(line, number) is not None
        except Exception:  # paramiko's reader raises InvalidHostKey(line, …) for such a line
            return f"{path}: not an OpenSSH known_hosts file (line {number})"
    if entries and not usable:
        return f"{path}: not an OpenSSH known_hosts file (no host key on any line; line {entries[0][0]})"
    return None


def _first_unparsable_line(text: str) -> int | None:
    """The number of the first line paramiko cannot parse on its own, if one can be named."""
    import paramiko

    for number, line in enumerate(text.splitlines(), start=1):
        try:
            paramiko.SSHConfig.from_text(line)
        except paramiko.ConfigParseError:
            return number
    return None
