"""The prompt set `qualify` sends: shipped and versioned (`prompts/v1.yaml`), or a site's own.

A prompt set is YAML read by the project's loader (`model.yamlio`: bounded, YAML 1.2, every
error `FILE:LINE:COL: field: message`) and validated by `PromptSet` (unknown keys refused,
strict types). Its hash (`PromptSetFile.digest`) is the sha256 of what is sent, in one
canonical JSON form: comments and layout do not change it, a changed prompt, sampling value
or round count does. A release records the hash of the set it was qualified with, and a
later run is only compared with a release of the same set.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator

from sparkbase.model.site import validated
from sparkbase.model.types import StrictModel
from sparkbase.model.yamlio import load_yaml

#: the shipped set a run uses without `--prompts`
SHIPPED = "v1.yaml"
#: a prompt's id: shown in findings and kept in records (no spaces or quotes)
PromptId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")]
#: the most prompts a set may hold, and the longest prompt (short prompts measure decode)
MAX_PROMPTS = 64
MAX_PROMPT_CHARS = 4000


class Sampling(StrictModel):
    """The sampling every request of the set uses: greedy, seeded, a fixed length."""

    temperature: Literal[0] = Field(description="greedy decoding: 0 (the only value the gate accepts)")
    seed: int = Field(ge=0, le=2**31 - 1, description="sampling seed sent with every request")
    max_tokens: int = Field(ge=2, le=4096, description="tokens generated per request")
    ignore_eos: bool = Field(
        default=True,
        description="generate max_tokens whatever the model would stop at (SGLang and vLLM both take "
        "`ignore_eos`), so every request times the same number of tokens",
    )


class Warmup(StrictModel):
    """Requests sent before each run and not counted (the engine's first requests are slow)."""

    requests: int = Field(ge=0, le=20, description="how many")
    prompt: Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROMPT_CHARS)] = Field(
        description="the prompt they send (best outside the set, so no prefix of the set is cached)"
    )


class Prompt(StrictModel):
    """One prompt of the set."""

    id: PromptId = Field(description="the prompt's name in findings and records")
    text: Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROMPT_CHARS)] = Field(
        description="sent as the completion's `prompt`"
    )


class PromptSet(StrictModel):
    """A prompt set file (`format: 1`)."""

    format: Literal[1] = Field(description="version of this file's layout")
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")] = Field(
        description="the set's name, shown beside its hash"
    )
    description: str = Field(default="", max_length=500, description="what the set is for")
    sampling: Sampling
    rounds: int = Field(default=1, ge=1, le=20, description="times each prompt is asked per run")
    warmup: Warmup
    prompts: list[Prompt] = Field(min_length=2, max_length=MAX_PROMPTS, description="in the order sent")

    @field_validator("prompts")
    @classmethod
    def _ids_once(cls, prompts: list[Prompt]) -> list[Prompt]:
        """Each id names one prompt (findings and records name prompts by id)."""
        seen: set[str] = set()
        for prompt in prompts:
            if prompt.id in seen:
                raise ValueError(f"prompt id {prompt.id} is used twice")
            seen.add(prompt.id)
        return prompts

    def samples_per_run(self) -> int:
        """Requests counted in one run (each prompt, `rounds` times)."""
        return len(self.prompts) * self.rounds


@dataclass(frozen=True)
class PromptSetFile:
    """A validated prompt set, where it came from and its hash."""

    prompts: PromptSet
    source: str  # the file's path, or `shipped:v1.yaml`

    @property
    def digest(self) -> str:
        """`sha256:<hex>` of the set's canonical JSON (what is sent, not how the file is laid out)."""
        return digest_of(self.prompts)

    def describe(self) -> str:
        """`sparkbase-v1 (sha256:1a2b3c4d5e6f…, 8 prompts x 2 rounds)`."""
        return (f"{self.prompts.name} ({self.digest[:19]}…, {len(self.prompts.prompts)} prompts x "
                f"{self.prompts.rounds} rounds)")


def digest_of(prompts: PromptSet) -> str:
    """`sha256:<hex>` of the canonical form of `prompts` (keys sorted, no whitespace)."""
    canonical = json.dumps(prompts.model_dump(mode="json"), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def load_prompt_set(path: Path | None = None) -> PromptSetFile:
    """The prompt set at `path`, else the shipped one; `ConfigError` (every problem, located)
    when the file is not a valid set."""
    if path is None:
        with resources.as_file(resources.files("sparkbase.qualify") / "prompts" / SHIPPED) as shipped:
            return PromptSetFile(validated(load_yaml(shipped), PromptSet), f"shipped:{SHIPPED}")
    return PromptSetFile(validated(load_yaml(path), PromptSet), str(path))
