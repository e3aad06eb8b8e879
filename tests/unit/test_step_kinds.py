"""The registry of step kinds (`sparkbase.deploy.kinds`): every kind is declared once, says
whether it records what it creates and whether it writes a file, and hands every one of its
typed arguments to its operation (mypy checks their types; this checks none is dropped)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lab_mok_pair import lab_mok_dir

from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.kinds import KINDS, Recorded, StepArgs, Writes
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.steps import build_steps
from sparkbase.model.site import load_site

REPO = Path(__file__).resolve().parents[2]
#: every module whose operations a kind adds
OPERATION_MODULES = [
    *(f"sparkbase.deploy.operations.{name}" for name in (
        "activation", "dkms", "fabric", "files", "host", "kernel", "memory", "packages",
        "secure_boot", "units")),
    "sparkbase.deploy.retire",
    "pyinfra.operations.files",
]


def _concrete(cls: type[Any]) -> list[type[Any]]:
    found = [] if inspect.isabstract(cls) else [cls]
    children: list[type[Any]] = cls.__subclasses__()
    return found + [sub for child in children for sub in _concrete(child)]


def test_every_kind_is_registered_once_under_its_name_and_adds_an_operation() -> None:
    concrete = _concrete(StepArgs)
    assert sorted(cls.__name__ for cls in KINDS.values()) == sorted({cls.__name__ for cls in concrete})
    assert all(KINDS[cls.kind] is cls for cls in concrete if issubclass(cls, StepArgs))
    with pytest.raises(TypeError, match="step kind thp declared twice"):
        type("Thp2", (StepArgs,), {}, kind="thp")


def test_which_kinds_record_and_which_write_a_file() -> None:
    """Only recorded things are ever retired: a kind moved out of `Recorded` by mistake would
    leave what it creates on other baselines' nodes for good."""
    assert {name for name, cls in KINDS.items() if issubclass(cls, Recorded)} == {
        "packages", "directory", "upload", "dkms-source", "dkms-install", "file", "swap-file",
        "factory-swap", "modeset-purge", "unit-enabled", "nvme-coalescing", "netplan-takeover"}
    assert {name for name, cls in KINDS.items() if issubclass(cls, Writes)} == {"file", "netplan-takeover"}


@pytest.mark.parametrize(("node", "baseline"), [("spark1", None), ("spark2", "ds41f-7x-64k"),
                                                ("spark3", "ds41f-stock-pages-262k")])
def test_recorded_steps_carry_the_baseline_they_are_recorded_under(node: str, baseline: str | None) -> None:
    site = load_site(REPO)
    if baseline:
        site = with_assignment(site, [node], baseline)
    steps = build_steps(site, node, MokFiles.from_dir(lab_mok_dir()))
    recorded = [s.args for s in steps if isinstance(s.args, Recorded)]
    assert recorded and {args.baseline for args in recorded} == {site.inventory.nodes[node].baseline}
    assert not [s for s in steps if not isinstance(s.args, Recorded) and "baseline" in s.args.as_dict()]


def test_building_steps_loads_no_pyinfra() -> None:
    """gevent must patch the standard library before pyinfra (and the ssl and paramiko it
    imports) is loaded; `deploy.session` builds the steps first, so the kinds import their
    operations only when they add them."""
    script = (
        "import sys\nfrom pathlib import Path\nfrom sparkbase.deploy import session\n"
        "from sparkbase.deploy.steps import build_steps\nfrom sparkbase.model.site import load_site\n"
        f"steps = build_steps(load_site(Path({str(REPO)!r})), 'spark1')\n"
        "print(len(steps), sorted({m.split('.')[0] for m in sys.modules} & {'pyinfra', 'paramiko', 'ssl'}))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    count, loaded = done.stdout.split(" ", 1)
    assert int(count) > 30 and loaded.strip() == "[]"


def _sample(field: dataclasses.Field[Any], local: Path) -> Any:
    """A value for `field` no other field of its kind has (so each can be found again)."""
    if field.name == "local":
        return str(local)
    types: dict[str, Any] = {"int": 4099, "bool": True, "list[str]": [f"<{field.name}>"]}
    if field.type in types:
        return types[field.type]
    if field.type.startswith(("dict", "Fabric")):
        return {f"<{field.name}>": {}}
    return f"<{field.name}>"  # str, and str | None


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_argument_reaches_the_operation(kind: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[dict[str, Any]] = []
    for module in map(importlib.import_module, OPERATION_MODULES):
        for attribute, value in vars(module).items():
            if hasattr(value, "_inner"):  # a pyinfra operation
                monkeypatch.setattr(module, attribute, lambda **kwargs: called.append(kwargs))
    local = tmp_path / "MOK.der"
    local.write_bytes(b"certificate")
    cls = KINDS[kind]
    args = cls(**{f.name: _sample(f, local) for f in dataclasses.fields(cls)})
    with pytest.raises(dataclasses.FrozenInstanceError):  # the class line makes it frozen, keyword-only
        setattr(args, "name", "changed")  # noqa: B010
    with pytest.raises(TypeError, match="positional"):
        cls(*args.as_dict().values())
    args.add("the step", None)
    assert len(called) == 1
    given = list(called[0].values())
    missing = [name for name, value in args.as_dict().items() if not any(value == v for v in given)]
    assert missing == [], f"{kind} does not hand {missing} to its operation"
