"""The prompt set: the shipped one loads, its hash follows what is sent (not the layout), a
bad site file is refused with FILE:LINE errors, and the wheel carries the shipped file."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from sparkbase.errors import ConfigError
from sparkbase.qualify.promptset import load_prompt_set

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
format: 1
name: site-set
sampling: {temperature: 0, seed: 7, max_tokens: 32}
rounds: 2
warmup: {requests: 1, prompt: "warm up"}
prompts:
  - id: a
    text: "The capital of France is"
  - id: b
    text: "1, 2, 3,"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prompts.yaml"
    path.write_text(text)
    return path


def test_the_shipped_set_loads_greedy_seeded_and_bounded() -> None:
    shipped = load_prompt_set()
    assert shipped.source == "shipped:v1.yaml"
    assert shipped.prompts.sampling.temperature == 0
    assert shipped.prompts.sampling.max_tokens == 256  # the site's probe: 256-token greedy runs
    assert len({p.id for p in shipped.prompts.prompts}) == len(shipped.prompts.prompts) >= 6
    assert all(len(p.text) < 200 for p in shipped.prompts.prompts)  # short prompts
    assert shipped.digest.startswith("sha256:") and len(shipped.digest) == 71


def test_the_hash_follows_what_is_sent_not_the_layout(tmp_path: Path) -> None:
    first = load_prompt_set(write(tmp_path, GOOD)).digest
    relaid = GOOD.replace("sampling: {temperature: 0, seed: 7, max_tokens: 32}",
                          "# greedy\nsampling:\n  max_tokens: 32\n  seed: 7\n  temperature: 0\n")
    assert load_prompt_set(write(tmp_path, relaid)).digest == first
    assert load_prompt_set(write(tmp_path, GOOD.replace("1, 2, 3,", "1, 2, 3, 4,"))).digest != first
    assert load_prompt_set(write(tmp_path, GOOD.replace("rounds: 2", "rounds: 3"))).digest != first


@pytest.mark.parametrize(("change", "where"), [
    (("temperature: 0", "temperature: 0.7"), ":3:12: sampling.temperature: Input should be 0 (got 0.7)"),
    (("rounds: 2", "round: 2"), ":4:1: round: unknown key 'round'; did you mean 'rounds'?"),
    (("id: b", "id: a"), ":6:1: prompts: prompt id a is used twice"),
    (("max_tokens: 32", "max_tokens: 1"), ":3:37: sampling.max_tokens: "),
])
def test_a_bad_set_is_refused_at_its_line(tmp_path: Path, change: tuple[str, str], where: str) -> None:
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ConfigError) as caught:
        load_prompt_set(path)
    lines = [problem.format() for problem in caught.value.problems]
    assert any(line.startswith(str(path)) and where in line for line in lines), lines


def test_a_set_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_prompt_set(write(tmp_path, "- just a list\n"))
    assert "expected a mapping" in str(caught.value)


def test_the_wheel_carries_the_shipped_set() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["sparkbase"]
    assert any(fnmatch("qualify/prompts/v1.yaml", pattern) for pattern in patterns)
    assert "src/sparkbase/qualify/prompts/*.yaml" in (REPO / "MANIFEST.in").read_text()  # the sdist too
