"""The e2e modules' port bases never meet: under pytest-xdist two modules run side by side,
so each module's lab (up to NODES_PER_LAB nodes from its base) needs ports no other
module's lab and no worker's session lab (tests/e2e/ports.py) can take."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[1] / "e2e"
sys.path.insert(0, str(E2E))
import ports  # noqa: E402  (tests/e2e/ports.py, not on the unit tier's path)

#: the most nodes any e2e module brings up from its base
NODES_PER_LAB = 4
BASE_CALL = re.compile(r'(session_)?port_base\(\s*"(?P<variable>[A-Z0-9_]+)",\s*(?P<default>\d+)\)')
SESSION_LAB = "SPARKBASE_TEST_LAB_PORT_BASE"


def declared_bases() -> dict[str, tuple[int, str]]:
    """Every `port_base("VAR", default)` in tests/e2e: variable -> (default, file)."""
    found: dict[str, tuple[int, str]] = {}
    for path in sorted(E2E.glob("*.py")):
        for match in BASE_CALL.finditer(path.read_text()):
            variable, default = match["variable"], int(match["default"])
            assert variable not in found or found[variable][0] == default, f"{variable} twice"
            found[variable] = (default, path.name)
    return found


def ranges(bases: dict[str, tuple[int, str]]) -> list[tuple[int, int, str]]:
    """(first port, end, owner) of every lab; the session lab once per possible worker."""
    out = []
    for variable, (base, file) in bases.items():
        if variable == SESSION_LAB:
            out += [(base + ports.WORKER_STRIDE * worker, base + ports.WORKER_STRIDE * worker + NODES_PER_LAB,
                     f"{file} (worker {worker})") for worker in range(ports.MAX_WORKERS)]
        else:
            out.append((base, base + NODES_PER_LAB, f"{file} ({variable})"))
    return sorted(out)


def clashes(spans: list[tuple[int, int, str]]) -> list[tuple[str, str]]:
    """Neighbouring spans (sorted) that overlap, by owner."""
    return [(a[2], b[2]) for a, b in itertools.pairwise(sorted(spans)) if b[0] < a[1]]


def test_the_scan_finds_the_modules_bases() -> None:
    bases = declared_bases()
    assert SESSION_LAB in bases and len(bases) >= 15


def test_no_two_labs_share_a_port() -> None:
    found = clashes(ranges(declared_bases()))
    assert not found, found


@pytest.mark.parametrize(("spans", "clash"), [
    ([(2301, 2305, "a"), (2305, 2309, "b")], False),
    ([(2301, 2305, "a"), (2304, 2308, "b")], True),
    ([(2304, 2308, "b"), (2301, 2305, "a")], True),
])
def test_the_clash_rule(spans: list[tuple[int, int, str]], clash: bool) -> None:
    assert bool(clashes(spans)) is clash


def test_worker_index_shifts_only_session_labs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKBASE_TEST_PORT_OFFSET", "4000")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    assert ports.worker_index() == 2
    assert ports.port_base("SPARKBASE_TEST_NOT_SET", 2801) == 6801
    assert ports.session_port_base("SPARKBASE_TEST_NOT_SET", 2301) == 6321
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{ports.MAX_WORKERS}")
    with pytest.raises(RuntimeError, match="at most"):
        ports.session_port_base("SPARKBASE_TEST_NOT_SET", 2301)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert ports.worker_index() == 0


def test_every_slowest_first_name_is_a_test_file() -> None:
    """The scheduling hint in tests/conftest.py names real files (a rename would drop one
    silently to the back of the queue)."""
    import ast

    root = Path(__file__).resolve().parents[2]
    tree = ast.parse((root / "tests" / "conftest.py").read_text())
    names = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SLOWEST_FIRST" for t in node.targets)
    )
    assert len(names) == len(set(names)) >= 10
    missing = [name for name in names if not list((root / "tests").glob(f"*/{name}.py"))]
    assert missing == []


def test_the_suite_hands_out_files_in_the_slowest_first_order() -> None:
    """pytest-xdist sorts `--dist loadfile` work by how many tests a file holds unless told
    `--no-loadscope-reorder`: without it SLOWEST_FIRST has no effect and the long e2e modules
    of a few tests each start last. scripts/test passes it and the installed xdist knows it."""
    import inspect

    import xdist.plugin  # type: ignore[import-untyped]

    root = Path(__file__).resolve().parents[2]
    command = (root / "scripts" / "test").read_text().replace("\\\n", " ")
    run = next(line for line in command.splitlines() if ".venv/bin/pytest" in line)
    assert "--dist loadfile" in run and "--no-loadscope-reorder" in run.split()
    assert '"--no-loadscope-reorder"' in inspect.getsource(xdist.plugin.pytest_addoption)


def test_every_e2e_module_is_marked_end_to_end() -> None:
    """`./scripts/test --quick` deselects the e2e tier by its marker (`-m "not end_to_end or
    smoke"`): a module without it runs its lab in the inner loop (test_lane_safety did:
    four minutes of the quick run)."""
    unmarked = [path.name for path in sorted(E2E.glob("test_*.py"))
                if not re.search(r"^pytestmark = .*pytest\.mark\.end_to_end", path.read_text(), re.MULTILINE)]
    assert unmarked == []


def test_test_file_basenames_are_unique_across_tiers() -> None:
    """pytest imports each test file by its basename (rootdir-relative, no packages): two
    tiers with one name make the second fail to collect ("import file mismatch")."""
    root = Path(__file__).resolve().parents[2] / "tests"
    names = [path.name for path in root.glob("*/test_*.py")]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []


def test_a_base_in_the_ephemeral_ports_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An offset that moves a lab among the ports outgoing connections take is refused with
    the reason, before any lab comes up; the bases of a run without an offset are fine."""
    monkeypatch.setattr(ports, "ephemeral_ports", lambda: (32768, 60999))
    monkeypatch.delenv("SPARKBASE_TEST_PORT_OFFSET", raising=False)
    assert ports.port_base("SPARKBASE_TEST_NO_SUCH_BASE", 3301) == 3301
    monkeypatch.setenv("SPARKBASE_TEST_PORT_OFFSET", "30000")
    with pytest.raises(RuntimeError, match=r"port base 33301 .* ephemeral ports 32768-60999"):
        ports.port_base("SPARKBASE_TEST_NO_SUCH_BASE", 3301)
    monkeypatch.setenv("SPARKBASE_TEST_PORT_OFFSET", "29000")
    with pytest.raises(RuntimeError, match="keep every base below 32348"):
        ports.port_base("SPARKBASE_TEST_NO_SUCH_BASE", 3451)  # its metrics ports reach 32851
