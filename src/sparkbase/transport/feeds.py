"""The transport's settings fed to the libraries that open their own SSH connections.

pyinfra's `@ssh` connector builds its own paramiko client from host data; these are its
documented connector settings (docs.pyinfra.com, connectors/ssh: `ssh_hostname`,
`ssh_user`, `ssh_config_file`, `ssh_known_hosts_file`, `ssh_strict_host_key_checking`,
`ssh_connect_retries`), filled from the same `SshTarget` sparkbase's own client uses, so
pyinfra refuses exactly the host keys sparkbase refuses. testinfra is fed in
`checks_plugin` (its paramiko backend gets sparkbase's client itself).
"""

from __future__ import annotations

import math
from typing import Any

from sparkbase.transport.targets import SshTarget


def pyinfra_host_data(target: SshTarget) -> dict[str, Any]:
    """pyinfra host data for one node: strict host keys, the site's or the lab's files,
    sudo (the `_sudo` global argument) when the login user is not root, and the deadlines:
    each operation command of apply gets `ssh.operation_timeout` (`_timeout`, pyinfra's
    per-command timeout), each fact read of plan and apply the audit's `ssh.command_timeout`
    (`sparkbase_command_timeout`, which the fact batch passes as its own `_timeout`)."""
    data: dict[str, Any] = {
        "sparkbase_node": target.node,
        "ssh_hostname": target.alias,
        "ssh_user": target.user,
        "ssh_known_hosts_file": str(target.known_hosts),
        "ssh_strict_host_key_checking": "yes",
        "ssh_connect_retries": 0,
        # pyinfra takes whole seconds
        "_timeout": math.ceil(target.operation_timeout),
        "sparkbase_command_timeout": target.command_timeout,
    }
    if target.config_file is not None:
        data["ssh_config_file"] = str(target.config_file)
    if target.sudo:
        data["_sudo"] = True
    return data
