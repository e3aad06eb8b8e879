"""Fleet agreement checks: keys every reachable node must share."""

from __future__ import annotations

from sparkbase.audit.registry import fleet_check
from sparkbase.facts.model import NodeFacts


def _governor(facts: NodeFacts) -> object:
    values = sorted(set(facts.governors.values()))
    return ",".join(values) if values else None


fleet_check("fleet.kernel", "fleet", "every node runs the same kernel", lambda f: f.kernel_release)
fleet_check("fleet.page_size", "fleet", "every node runs the same page size", lambda f: f.page_size)
fleet_check("fleet.driver", "fleet", "every node runs the same driver", lambda f: f.gpu.driver_version)
fleet_check(
    "fleet.nccl_library",
    "fleet",
    "every node loads the same NCCL library",
    lambda f: f.nccl_library_sha256,
)
fleet_check("fleet.thp", "fleet", "every node has the same THP mode", lambda f: f.thp)
fleet_check(
    "fleet.secure_boot", "fleet", "every node has the same Secure Boot state", lambda f: f.secure_boot
)
fleet_check("fleet.governor", "fleet", "every node runs the same CPU governor", _governor)
fleet_check(
    "fleet.min_free_kbytes",
    "fleet",
    "every node keeps the same free-memory reserve (vm.min_free_kbytes)",
    lambda f: f.sysctls.get("vm.min_free_kbytes"),
)


def _nvidia_modules(facts: NodeFacts) -> object:
    """Loaded NVIDIA modules as `module version/srcversion` (the source they were built from)."""
    names = sorted({key.split(".", 1)[0] for key in facts.nvidia_modules})
    found = [
        f"{name} {facts.nvidia_modules.get(name + '.version', '?')}/"
        f"{facts.nvidia_modules.get(name + '.srcversion', '?')}"
        for name in names
    ]
    return "; ".join(found) or None


fleet_check(
    "fleet.nvidia_modules",
    "fleet",
    "every node loads the same NVIDIA modules, same version, built from the same source",
    _nvidia_modules,
)
