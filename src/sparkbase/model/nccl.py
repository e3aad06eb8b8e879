"""The nccl section: the NCCL library every lane loads and /etc/nccl.conf, shared and per shape."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from sparkbase.model.paths import LibraryPath
from sparkbase.model.shapes import ShapeName
from sparkbase.model.types import (
    Name,
    PackageName,
    PackagePin,
    PackageVersion,
    Sha256,
    StrictModel,
    ZeroOrOne,
    text_value,
)

NcclKey = Annotated[str, StringConstraints(pattern=r"^NCCL_[A-Z0-9_]{1,60}$")]
#: NCCL keys a typed field renders, and that field: `extra` may not set them
TYPED_NCCL_KEYS: dict[str, str] = {
    "NCCL_IB_MERGE_NICS": "ib_merge_nics",
    "NCCL_IB_HCA": "ib_hca",
    "NCCL_SOCKET_IFNAME": "socket_ifname",
    "NCCL_IB_GID_INDEX": "ib_gid_index",
    "NCCL_MIN_NCHANNELS": "min_nchannels",
    "NCCL_MAX_NCHANNELS": "max_nchannels",
}


def _not_a_typed_nccl_key(key: str) -> str:
    """An `extra` key must not shadow a typed setting (the contract judges the typed one)."""
    if key in TYPED_NCCL_KEYS:
        raise ValueError(
            f"{key} is a typed setting: set nccl.settings.{TYPED_NCCL_KEYS[key]}, not extra "
            "(an extra key would override it in /etc/nccl.conf)"
        )
    return key


NcclExtraKey = Annotated[NcclKey, AfterValidator(_not_a_typed_nccl_key)]
NcclValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:=^/+-]{0,200}$")]


class NcclLibrary(StrictModel):
    """The one NCCL library every lane loads, and where it comes from (`provided_by`).

    `package` (the default): a Debian package sparkbase installs and holds at `version`; it
    ships the file at `path`, identified by `sha256`. `site`: a plain file the site puts at
    `path` itself (the site's patched build, bind-mounted into its containers); sparkbase
    never installs, holds or removes anything for it, and the audit and the launch gate
    still judge that the file at `path` has `sha256` and that serving processes map it.
    `image`: NCCL is built into the lane's container image (the variant's recipe builds NCCL
    2.30.7 into its image): nothing on the host, so no `package`, `path` or `sha256`; the
    lane's runtime check reads the version the serving process maps (from the library's
    file name) and judges it against `version` when it can tell.

    A `site` library refuses `package` and `version` rather than keeping them as
    information: every value in a baseline is one sparkbase enforces or judges, and a
    package name and version beside a file nobody installs would read as a pin that
    `plan`, `audit` and `compare` never act on. Where the file comes from belongs in the
    baseline's `sources:` (`nccl.library: {kind: site, note: ...}`).
    """

    provided_by: Literal["package", "site", "image"] = Field(
        default="package",
        description="package: a Debian package sparkbase installs and holds (needs package, version, path, "
        "sha256); site: a file the site puts at path itself (checked, never installed: path and sha256); "
        "image: built into the lane's container image (nothing on the host; version judged at runtime)",
    )
    package: PackageName | None = Field(
        default=None, description="Debian package that ships the library (provided_by: package only)"
    )
    version: PackageVersion | None = Field(
        default=None,
        description="exact package version (provided_by: package), or the NCCL version the image's library "
        "reports in its file name, libnccl.so.VERSION (provided_by: image, optional)",
    )
    path: LibraryPath | None = Field(
        default=None, description="path of the shared object on the node (provided_by: package or site)"
    )
    sha256: Sha256 | None = Field(
        default=None, description="sha256 of the shared object file (provided_by: package or site)"
    )

    @field_validator("package", "version", "path", "sha256")
    @classmethod
    def _fields_of_its_kind(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Each kind takes exactly its own fields: a value nobody acts on is refused."""
        provided_by = info.data.get("provided_by")  # absent when provided_by itself is wrong
        field = info.field_name
        if provided_by == "package" and value is None:
            raise ValueError("required: the library is provided_by: package, so sparkbase installs "
                             "that package at an exact version (or say provided_by: site or image)")
        if provided_by == "site" and value is None and field in {"path", "sha256"}:
            raise ValueError("required: the library is provided_by: site, judged by its path and sha256")
        if provided_by == "site" and value is not None and field in {"package", "version"}:
            raise ValueError(f"a library provided_by: site is a file the site puts there: sparkbase installs "
                             f"no package for it, so it takes no {field} (remove it, or say "
                             "provided_by: package)")
        if provided_by == "image" and value is not None and field != "version":
            raise ValueError(f"a library provided_by: image is built into the lane's container image: "
                             f"nothing is installed or judged on the host, so it takes no {field} "
                             "(remove it, or say provided_by: package or site)")
        return value

    def on_host(self) -> bool:
        """Whether the library is a host file (package or site) the host audit judges."""
        return self.provided_by != "image"

    def pin(self) -> PackagePin | None:
        """The package sparkbase installs for the library (None for a site file or an image's)."""
        if self.provided_by != "package" or self.package is None or self.version is None:
            return None
        return PackagePin(name=self.package, version=self.version)


class NcclSettings(StrictModel):
    """Settings written to /etc/nccl.conf (KEY=value lines NCCL reads at init)."""

    ib_merge_nics: ZeroOrOne = Field(
        description="NCCL_IB_MERGE_NICS; NCCL defaults to 1, so the site's 0 must be explicit"
    )
    ib_hca: list[Name] = Field(
        min_length=1, description="NCCL_IB_HCA: the RDMA devices NCCL may use (name or name:port)"
    )
    socket_ifname: Name = Field(description="NCCL_SOCKET_IFNAME: interface for bootstrap")
    ib_gid_index: int = Field(ge=0, le=255, description="NCCL_IB_GID_INDEX: RoCE v2 IPv4 GID")
    min_nchannels: int | None = Field(default=None, ge=1, le=64, description="NCCL_MIN_NCHANNELS")
    max_nchannels: int | None = Field(default=None, ge=1, le=64, description="NCCL_MAX_NCHANNELS")
    extra: dict[NcclExtraKey, Annotated[NcclValue, BeforeValidator(text_value)]] = Field(
        default_factory=dict,
        description="further NCCL_* settings, written as given (never a key a typed field sets)",
    )

    def as_env(self) -> dict[str, str]:
        """Every setting as NCCL's KEY -> value text, typed fields first, then extras.

        This is exactly what /etc/nccl.conf holds, so rules that judge NCCL read it here.
        """
        env = {
            "NCCL_IB_MERGE_NICS": str(self.ib_merge_nics),
            "NCCL_IB_HCA": ",".join(self.ib_hca),
            "NCCL_SOCKET_IFNAME": self.socket_ifname,
            "NCCL_IB_GID_INDEX": str(self.ib_gid_index),
        }
        if self.min_nchannels is not None:
            env["NCCL_MIN_NCHANNELS"] = str(self.min_nchannels)
        if self.max_nchannels is not None:
            env["NCCL_MAX_NCHANNELS"] = str(self.max_nchannels)
        for key in sorted(self.extra):
            env[key] = self.extra[key]
        return env


class ShapeNcclSettings(StrictModel):
    """The NCCL settings one serving shape adds to, or changes in, `nccl.settings` (the
    variant's ring4 and triangle3 run different NCCL policies on the same hosts: spark-ds41f
    config/cluster-tp4.json and config/cluster-4k.json). Unset fields keep the shared value;
    `extra` keys are added, or replace a shared extra of the same name."""

    ib_merge_nics: ZeroOrOne | None = Field(default=None, description="NCCL_IB_MERGE_NICS on this shape")
    ib_hca: list[Name] | None = Field(
        default=None, min_length=1, description="NCCL_IB_HCA on this shape (the devices, in NCCL's order)"
    )
    min_nchannels: int | None = Field(default=None, ge=1, le=64,
                                      description="NCCL_MIN_NCHANNELS on this shape")
    max_nchannels: int | None = Field(default=None, ge=1, le=64,
                                      description="NCCL_MAX_NCHANNELS on this shape")
    extra: dict[NcclExtraKey, Annotated[NcclValue, BeforeValidator(text_value)]] = Field(
        default_factory=dict,
        description="further NCCL_* settings of this shape, written as given (never a key a typed field "
        "sets)",
    )


class NcclSpec(StrictModel):
    """NCCL: the shared library, the settings every shape shares and each shape's own."""

    library: NcclLibrary = Field(description="the NCCL shared library every lane loads")
    settings: NcclSettings = Field(
        description="settings written to /etc/nccl.conf on every node, whatever its shape"
    )
    shapes: dict[ShapeName, ShapeNcclSettings | None] = Field(
        default_factory=dict,
        description="per serving shape (ring4, triangle3): the settings a node of that shape adds to or "
        "changes in `settings` (its /etc/nccl.conf, and what its lanes' processes must load); null: none "
        "(a baseline that extends one with a shape it is not qualified for drops them so)",
    )

    def settings_for(self, shape: str | None) -> NcclSettings:
        """The effective settings of a node or lane of `shape` (None: the shared ones)."""
        own = next((settings for name, settings in self.shapes.items() if name == shape), None)
        if own is None:
            return self.settings
        changed = own.model_dump(exclude={"extra"}, exclude_none=True)
        return self.settings.model_copy(update={**changed, "extra": {**self.settings.extra, **own.extra}})

    def env_for(self, shape: str | None) -> dict[str, str]:
        """NCCL's KEY -> value text on `shape` (`NcclSettings.as_env` of `settings_for`)."""
        return self.settings_for(shape).as_env()

    def shaped(self) -> dict[str, ShapeNcclSettings]:
        """The shapes that carry settings of their own."""
        return {name: own for name, own in self.shapes.items() if own is not None}
