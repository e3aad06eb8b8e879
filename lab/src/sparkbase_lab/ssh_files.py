"""The SSH client files a lab writes: `ssh_config`, `known_hosts`, `inventory.yaml`.

`known_hosts` lists each node's host key under `[127.0.0.1]:PORT`, the alias and
`[alias]:PORT`, so OpenSSH (`ssh -F ssh_config sparkN`) and paramiko (with `SSHConfig`,
`load_host_keys(known_hosts)` and `RejectPolicy`) both verify it strictly.
"""

from __future__ import annotations

from pathlib import Path

from sparkbase.atomicfile import write_atomic


def ssh_config_text(names: list[str], ports: list[int], key: Path, known_hosts: Path) -> str:
    """One `Host` block per node: loopback, its port, root, the lab key, strict host keys."""
    blocks = ["# written by `sparkbase lab up`; use with `ssh -F <this file> sparkN`\n"]
    for name, port in zip(names, ports, strict=True):
        blocks.append(
            f"Host {name}\n"
            "  HostName 127.0.0.1\n"
            f"  Port {port}\n"
            "  User root\n"
            f"  IdentityFile {key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known_hosts}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  CheckHostIP no\n"
            "  LogLevel ERROR\n"
            "  ConnectTimeout 10\n"
        )
    return "\n".join(blocks)


def known_hosts_text(names: list[str], ports: list[int], host_keys: dict[str, str]) -> str:
    """known_hosts lines for every node (`[127.0.0.1]:PORT,alias,[alias]:PORT keytype key`)."""
    lines = []
    for name, port in zip(names, ports, strict=True):
        keytype, key = host_keys[name].split()[:2]
        lines.append(f"[127.0.0.1]:{port},{name},[{name}]:{port} {keytype} {key}\n")
    return "".join(lines)


def inventory_text(names: list[str], ports: list[int], labdir: Path) -> str:
    """`inventory.yaml`: the nodes and the SSH files to reach them."""
    out = [
        "# written by `sparkbase lab up` (the emulated fleet)",
        "format: 1",
        f"ssh_config: {labdir / 'ssh_config'}",
        f"known_hosts: {labdir / 'known_hosts'}",
        f"identity_file: {labdir / 'id_ed25519'}",
        "nodes:",
    ]
    for name, port in zip(names, ports, strict=True):
        out += [f"  {name}:", "    host: 127.0.0.1", f"    port: {port}", "    user: root"]
    return "\n".join(out) + "\n"


def write(labdir: Path, names: list[str], ports: list[int], host_keys: dict[str, str],
          key: Path) -> None:
    """Write the three files into `labdir`."""
    known = labdir / "known_hosts"
    write_atomic(labdir / "ssh_config", ssh_config_text(names, ports, key, known))
    write_atomic(known, known_hosts_text(names, ports, host_keys))
    write_atomic(labdir / "inventory.yaml", inventory_text(names, ports, labdir))
