"""Files (shared): a directory, an uploaded local file, a rendered file byte for byte; a
file only other baselines render, retired."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.deploy.kinds import NodeReads, Recorded, Step, StepArgs, Writes

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.policy.foreign import Foreign
    from sparkbase.render import RenderedFile


class Directory(Recorded, kind="directory"):
    """A directory with its mode."""

    path: str
    mode: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.files import directory
        return directory(name=name, path=self.path, mode=self.mode, baseline=self.baseline)


class Upload(Recorded, kind="upload"):
    """A local file (the operator's, e.g. the MOK key pair) uploaded to `path`."""

    path: str
    local: str
    mode: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.files import upload
        sha256 = hashlib.sha256(Path(self.local).read_bytes()).hexdigest()
        return upload(name=name, path=self.path, local=self.local, mode=self.mode, sha256=sha256,
                      baseline=self.baseline)


class File(Writes, Recorded, kind="file"):
    """A rendered file, byte for byte, with its mode."""

    content: str
    mode: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)
        if not secret:
            into.texts.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.files import file
        return file(name=f"file {self.path}", path=self.path, content=self.content, mode=self.mode,
                    sha256=hashlib.sha256(self.content.encode()).hexdigest(), baseline=self.baseline)


class FileRetire(StepArgs, kind="file-retire"):
    """A file only other baselines render, removed."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import file_retire
        return file_retire(name=name, path=self.path)



def file_step(file: RenderedFile) -> Step:
    """The rendered file put byte for byte, in its section."""
    return Step(File(path=file.path, content=file.content, mode=file.mode),
                f"{file.path} ({file.purpose})" if file.purpose else file.path, reboot=file.needs_reboot,
                section=file.section)


def retire_files(foreign: Foreign) -> list[Step]:
    """The files only other baselines render, removed (each only if sparkbase wrote it)."""
    return [Step(FileRetire(path=path), f"retire: {path} (rendered only by {', '.join(owners)})",
                 section="host") for path, owners in foreign.files]
