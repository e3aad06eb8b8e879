"""How sparkbase reaches a node: one strict SSH transport.

- `targets`: where each node is and how to reach it (`SshTarget`, from the inventory or
  the lab), with the ssh_config and known_hosts checked before anything connects;
- `client`: sparkbase's one paramiko client (strict host keys, timeouts, sudo): facts,
  reboot waits, diagnosis;
- `failure`: why a node could not be asked, as a typed `FailureKind`;
- `feeds`: the same settings for pyinfra's connector.

The names most callers need are importable from here; `client` and `feeds` are imported
where used (paramiko is imported only when a connection is made).
"""

from sparkbase.transport.failure import HOST_KEY_HELP, FailureKind, NodeFailure, TransportError
from sparkbase.transport.targets import (
    DEFAULT_LAB_DIR,
    MAX_SSH_FILE_BYTES,
    SshReach,
    SshTarget,
    known_hosts_problem,
    lab_dir,
    plain_file_problem,
    reach_of,
    read_plain_file,
    ssh_config_problem,
    ssh_targets,
    targets_for,
)

__all__ = [
    "DEFAULT_LAB_DIR",
    "HOST_KEY_HELP",
    "MAX_SSH_FILE_BYTES",
    "FailureKind",
    "NodeFailure",
    "SshReach",
    "SshTarget",
    "TransportError",
    "known_hosts_problem",
    "lab_dir",
    "plain_file_problem",
    "reach_of",
    "read_plain_file",
    "ssh_config_problem",
    "ssh_targets",
    "targets_for",
]
