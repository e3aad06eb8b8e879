"""Pure parsers: one command's output or file in, one typed value out; no host needed.

One parser per command or file, used by the audit (`facts/assemble.py`), by plan/apply
(through the same fact script and `facts/assemble.py`: `deploy/node.py`), and by `checks/`.
Each reads what a real DGX OS node prints (samples with sources in
`tests/fixtures/real/`) and raises `ValueError` on text it cannot read, so a garbled
answer is recorded, never guessed at. One module per baseline section (`kernel.py`,
`driver.py`, `nccl.py`, `fabric.py`, `memory.py`, `secure_boot.py`, `host.py`, `cpuset.py`)
and one per cross-cutting source (units, packages, modules, files, ownership, the OS image,
Docker, serving processes); every name is re-exported here, so
`from sparkbase.facts.parsers import parse_grub` keeps working.
"""

from __future__ import annotations

from sparkbase.facts.parsers.cpuset import (
    FAST_CPU_PART,
    format_cpu_list,
    parse_cpu_list,
    parse_fast_cpus,
)
from sparkbase.facts.parsers.docker import (
    container_id,
    parse_cgroup_container_id,
    parse_container_inspect,
    parse_image_inspect,
)
from sparkbase.facts.parsers.driver import parse_event_reasons, parse_nvidia_smi_csv, parse_nvidia_smi_query
from sparkbase.facts.parsers.fabric import (
    parse_gid_table,
    parse_ip_addr_json,
    parse_ls,
    parse_netplan_listing,
    parse_netplan_yaml,
)
from sparkbase.facts.parsers.files import parse_links, parse_sha256sum, parse_stamp
from sparkbase.facts.parsers.host import (
    ConsoleMode,
    DrmClient,
    EfiBoot,
    EfiEntry,
    parse_console_mode,
    parse_drm_clients,
    parse_drm_clients_file,
    parse_drm_drivers,
    parse_efibootmgr,
    parse_governors,
    parse_manager_properties,
    parse_nvme_feature,
)
from sparkbase.facts.parsers.kernel import (
    parse_cmdline,
    parse_grub,
    parse_grubenv,
    parse_page_size,
    parse_uname_rm,
)
from sparkbase.facts.parsers.lines import parse_single_line
from sparkbase.facts.parsers.memory import (
    SWAP_MAGIC,
    parse_fstab,
    parse_proc_swaps,
    parse_swap_header,
    parse_swap_header_probes,
    parse_swapon_show,
    parse_sysctl_output,
    parse_thp,
)
from sparkbase.facts.parsers.modules import (
    modinfo_fields,
    parse_dkms_status,
    parse_modinfo,
    parse_module_attrs,
    parse_proc_modules,
)
from sparkbase.facts.parsers.nccl import parse_kv_conf, parse_nccl_conf
from sparkbase.facts.parsers.os_release import dgx_os_version, parse_os_release
from sparkbase.facts.parsers.packages import parse_dpkg_query, parse_showhold
from sparkbase.facts.parsers.runtime import (
    parse_cgroup,
    parse_cmdline_args,
    parse_environ,
    parse_maps_files,
    parse_probe,
    parse_status_cpus,
    parse_status_ppid,
)
from sparkbase.facts.parsers.secure_boot import (
    normalise_serial,
    parse_mok_certificates,
    parse_mok_enrolled,
    parse_sb_state,
)
from sparkbase.facts.parsers.units import parse_need_daemon_reload, parse_systemctl_show, unit_state

__all__ = [
    "FAST_CPU_PART",
    "SWAP_MAGIC",
    "ConsoleMode",
    "DrmClient",
    "EfiBoot",
    "EfiEntry",
    "container_id",
    "dgx_os_version",
    "format_cpu_list",
    "modinfo_fields",
    "normalise_serial",
    "parse_cgroup",
    "parse_cgroup_container_id",
    "parse_cmdline",
    "parse_cmdline_args",
    "parse_console_mode",
    "parse_container_inspect",
    "parse_cpu_list",
    "parse_dkms_status",
    "parse_dpkg_query",
    "parse_drm_clients",
    "parse_drm_clients_file",
    "parse_drm_drivers",
    "parse_efibootmgr",
    "parse_environ",
    "parse_event_reasons",
    "parse_fast_cpus",
    "parse_fstab",
    "parse_gid_table",
    "parse_governors",
    "parse_grub",
    "parse_grubenv",
    "parse_image_inspect",
    "parse_ip_addr_json",
    "parse_kv_conf",
    "parse_links",
    "parse_ls",
    "parse_manager_properties",
    "parse_maps_files",
    "parse_modinfo",
    "parse_module_attrs",
    "parse_mok_certificates",
    "parse_mok_enrolled",
    "parse_nccl_conf",
    "parse_need_daemon_reload",
    "parse_netplan_listing",
    "parse_netplan_yaml",
    "parse_nvidia_smi_csv",
    "parse_nvidia_smi_query",
    "parse_nvme_feature",
    "parse_os_release",
    "parse_page_size",
    "parse_probe",
    "parse_proc_modules",
    "parse_proc_swaps",
    "parse_sb_state",
    "parse_sha256sum",
    "parse_showhold",
    "parse_single_line",
    "parse_stamp",
    "parse_status_cpus",
    "parse_status_ppid",
    "parse_swap_header",
    "parse_swap_header_probes",
    "parse_swapon_show",
    "parse_sysctl_output",
    "parse_systemctl_show",
    "parse_thp",
    "parse_uname_rm",
    "unit_state",
]
