"""Where netplan reads its files, and which one is sparkbase's (constants only: the audit, the
deploy and the model all name them, and none of them may pull in another's imports).

netplan reads `*.yaml` in three directories (netplan-generate(8) "HANDLING MULTIPLE FILES",
canonical/netplan e9dd90a9): /lib/netplan (the OS's), /etc/netplan (the site's) and
/run/netplan (generated at run time, gone at reboot), a later directory shadowing a file of the
same name in an earlier one.
"""

from __future__ import annotations

#: where netplan reads its YAML, lowest priority first (a later directory shadows an earlier one)
NETPLAN_DIRS = ("/lib/netplan", "/etc/netplan", "/run/netplan")
#: the one directory of a site's own netplan files (/lib is the OS's, /run does not survive a reboot)
SITE_NETPLAN_DIR = "/etc/netplan"
#: the netplan file sparkbase writes the fabric into when the site names none of its own
SPARKBASE_NETPLAN_PATH = f"{SITE_NETPLAN_DIR}/60-sparkbase-fabric.yaml"
