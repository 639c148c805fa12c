"""Recipe schema: every field validated before anything runs (loading lives in load.py)."""

from __future__ import annotations

import math
import posixpath
import re
from typing import Optional, Union

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servebuild.engines import kind_for
from servebuild.errors import InputError, PlacedValueError
from servebuild.engines.base import GENERIC
from servebuild.engines.profiles import LaunchProfile, module_names, printable
from servebuild.modes import get_mode
from servebuild.platforms import PLATFORMS
from servebuild.recipe.grammar import (
    ABS_DIR,
    APT_PACKAGE,
    ARCH_LIST,
    CUDA_VERSION,
    DIST_NAME,
    GIT_TAG,
    IMAGE_REF,
    MAX_REFERENCE,
    NAME,
    reserved_command,
    REL_DIR,
    SHA40,
    SHA256,
    SM_ARCH,
    USER,
    VERSION,
    matches,
    shown,
)


def pattern_field(name: str, pattern: re.Pattern, what: str):
    """A field validator: the value (if set) matches `pattern` and holds no `..` segment."""
    return field_validator(name)(classmethod(lambda cls, v: v if v is None else matches(pattern, v, what)))


def printable_field(*names: str):
    """A field validator: one line of printable text (free text such as descriptions and notes
    reaches labels, manifests and tables, never a Dockerfile line or a shell word)."""
    return field_validator(*names)(classmethod(lambda cls, v, info: printable(v, info.field_name)))


class Model(BaseModel):
    # strict: YAML already gives real types; `true` is not 1 and "4" is not 4
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def full_sha(value: str) -> str:
    if not SHA40.match(value):
        raise ValueError(f"{value!r} is not a full 40-hex commit SHA (short or malformed)")
    return value


class BaseImage(Model):
    ref: str  # docker reference name[:tag]; `{arch}` names per-arch local images
    digest: Optional[str] = None  # filled by `lock`; a local image id for bootstrapped bases

    @field_validator("ref")
    @classmethod
    def _ref(cls, v: str) -> str:
        if not IMAGE_REF.match(v) or "@" in v:
            raise ValueError(
                f"{shown(v)} is not an image reference name[:tag] of at most {MAX_REFERENCE} characters "
                f"(put a digest in `digest`)"
            )
        return v

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^sha256:[0-9a-f]{64}\Z", v):
            raise ValueError(f"{v!r} is not a digest of the form sha256:<64 hex>")
        return v


class Bases(Model):
    build: BaseImage  # FROM of the build stages (a -devel image where the build compiles)
    runtime: BaseImage  # FROM of the runtime stage


class PatchEntry(Model):
    """One entry of a patch stack: an upstream PR (by pinned commit) or a local patch file."""

    id: str  # name of the entry (variants and `requires` use it)
    pr: Optional[int] = Field(default=None, gt=0)  # upstream PR number (fetched by pinned commit, never vendored)
    commit: Optional[str] = None  # full SHA of the commit carrying the PR
    commit_hint: Optional[str] = None  # short SHA from release notes; `lock` resolves it
    base: Optional[str] = None  # for a PR head: the commit the diff is taken against
    file: Optional[str] = None  # local patch, relative to the repository root
    sha256: Optional[str] = None  # of the exact diff applied
    requires: list[str] = []  # ids of entries that must come earlier in the stack
    conflicts: list[str] = []  # ids of entries that must not be in the same stack (either side may say it)
    fixes: list[str] = []  # known engine defects this entry fixes (the engine kind's `defects`)
    note: str = ""  # free text, shown nowhere else

    _note = printable_field("note")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"{v!r} is not a valid id (lowercase letters, digits, '-')")
        return v

    @field_validator("requires", "conflicts", "fixes")
    @classmethod
    def _ids(cls, v: list[str], info) -> list[str]:
        for item in v:
            if not NAME.match(item):
                raise ValueError(f"{info.field_name}: {item!r} is not a valid id (lowercase letters, digits, '-')")
        if len(set(v)) != len(v):
            raise ValueError(f"{info.field_name}: an id is listed twice")
        return v

    @field_validator("commit", "base")
    @classmethod
    def _full(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else full_sha(v)

    @field_validator("commit_hint")
    @classmethod
    def _hint(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^[0-9a-f]{7,39}\Z", v):
            raise ValueError(f"{v!r} is not a short hex SHA (7 to 39 hex digits)")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not SHA256.match(v):
            raise ValueError(f"{v!r} is not a sha256 (64 lowercase hex digits)")
        return v

    @model_validator(mode="after")
    def _kind(self) -> "PatchEntry":
        if (self.pr is None) == (self.file is None):
            raise ValueError("a patch entry is either an upstream `pr` or a local `file`, exactly one")
        if self.file is not None:
            if not self.file.startswith("patches/") or not self.file.endswith(".patch"):
                raise ValueError(f"local patch {self.file!r} must be a patches/*.patch file")
            if self.sha256 is None:
                raise ValueError("a local patch needs its `sha256`")
            if self.commit or self.commit_hint or self.base:
                raise ValueError("a local patch takes no commit, commit_hint or base")
        return self

    @property
    def kind(self) -> str:
        return "pr" if self.pr is not None else "file"

    @property
    def resolved(self) -> bool:
        return self.file is not None or (self.commit is not None and self.sha256 is not None)

    def label(self) -> str:
        return self.file if self.file else f"PR #{self.pr}"


class EngineSource(Model):
    url: str  # upstream git URL (a config may map it to a mirror)
    commit: str  # the tree's full 40-hex commit SHA, always
    tag: Optional[str] = None  # the release tag of that commit (documentation; checked against the release)
    sdist_commit: Optional[str] = None  # the commit the release sdist was cut from, if not `commit`
    subdir: str = "."  # the directory of the tree that pip installs
    patches: list[PatchEntry] = []  # applied in order, 3-way where possible
    optional_patches: list[PatchEntry] = []  # not applied by default; variants may pick them

    _tag = pattern_field("tag", GIT_TAG, "a git tag name such as v0.5.16")

    @field_validator("commit")
    @classmethod
    def _commit(cls, v: str) -> str:
        return full_sha(v)

    @field_validator("sdist_commit")
    @classmethod
    def _sdist_commit(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^[0-9a-f]{7,40}\Z", v):
            raise ValueError(f"{v!r} is not a hex SHA (7 to 40 lowercase hex digits, short as the sdist states it)")
        return v

    _subdir = pattern_field("subdir", REL_DIR, "a relative directory of the tree")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^(https?|git|ssh|file)://\S+\Z", v):
            raise ValueError(f"{v!r} is not a git URL (https://, git://, ssh:// or file://)")
        return v

    @model_validator(mode="after")
    def _stack(self) -> "EngineSource":
        check_stack(self.patches)
        ids = {e.id for e in self.patches}
        for entry in self.optional_patches:
            if entry.id in ids:
                raise ValueError(f"optional patch {entry.id!r} has the id of a stack entry")
        check_stack(self.patches + self.optional_patches, order=False)
        return self

    def entries(self) -> dict[str, PatchEntry]:
        return {e.id: e for e in self.patches + self.optional_patches}


def check_stack(entries: list[PatchEntry], order: bool = True, where: str = "") -> None:
    """No duplicates; every `requires` earlier in the stack (or, without order, anywhere in it); no two
    entries of a stack that conflict (without order: the recipe's pool, every conflict names an entry)."""
    seen: dict[str, PatchEntry] = {}
    for entry in entries:
        if entry.id in seen:
            raise ValueError(f"{where}duplicate patch entry {entry.id!r}")
        for prior in seen.values():
            same = (entry.pr is not None and entry.pr == prior.pr) or (
                entry.file is not None and entry.file == prior.file
            )
            if same:
                raise ValueError(f"{where}patch entry {entry.id!r} duplicates {prior.id!r}")
        seen[entry.id] = entry
    for i, entry in enumerate(entries):
        if entry.id in entry.conflicts:
            raise ValueError(f"{where}patch entry {entry.id!r} conflicts with itself")
        unknown = next((c for c in entry.conflicts if c not in seen), None)
        if not order and unknown:  # the recipe's pool of entries: each conflict names one of them
            raise ValueError(f"{where}patch entry {entry.id!r} conflicts with {unknown!r}, which is not in the stack")
        for prior in entries[:i] if order else ():
            if prior.id in entry.conflicts or entry.id in prior.conflicts:
                said = entry if prior.id in entry.conflicts else prior
                raise ValueError(
                    f"{where}patch entries {prior.id!r} ({prior.label()}) and {entry.id!r} ({entry.label()}) "
                    f"conflict (as {said.id!r} declares): a stack carries one of them"
                )
        earlier = {e.id for e in entries[:i]} if order else set(seen) - {entry.id}
        for need in entry.requires:
            if need == entry.id:
                raise ValueError(f"{where}patch entry {entry.id!r} requires itself")
            if need not in earlier:
                why = (
                    "comes later in the stack (order it first, or the requires is cyclic)"
                    if need in seen
                    else "is not in the stack"
                )
                raise ValueError(f"{where}patch entry {entry.id!r} requires {need!r}, which {why}")


class Engine(Model):
    name: str
    version: str
    install: str = "pip-source"  # a registered install mode (servebuild/modes): pip-source, vllm-precompiled, ...
    source: EngineSource  # the pinned tree and its patch stack
    precompiled: dict[str, str] = {}  # platform -> hashed requirement file of the release wheel
    sdist: Optional[str] = None  # hashed requirement file of the release sdist (a source tree without GitHub)
    overlay_from: Optional[str] = None  # wheel-overlay: the package directory in the tree, e.g. python/sglang
    native_extensions: list[str] = []  # python modules holding compiled extensions, for arch checks

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"{v!r} is not a valid engine name")
        return v

    _version = pattern_field("version", VERSION, "a version such as 0.5.16")

    @field_validator("version")
    @classmethod
    def _pep440(cls, v: str) -> str:
        try:
            Version(v)
        except InvalidVersion:
            raise ValueError(f"{v!r} is not a PEP 440 version") from None
        return v

    _overlay = pattern_field("overlay_from", REL_DIR, "a relative directory of the tree (e.g. python/sglang)")

    @field_validator("install")
    @classmethod
    def _install(cls, v: str) -> str:
        get_mode(v)
        return v

    _modules = field_validator("native_extensions")(classmethod(lambda cls, v: module_names(v)))

    @property
    def mode(self):
        return get_mode(self.install)

    @property
    def kind(self):
        return kind_for(self.name)


class BuildResources(Model):
    max_jobs: Optional[int] = Field(default=None, ge=1, le=512)  # MAX_JOBS (default: from cores and memory)
    nvcc_threads: Optional[int] = Field(default=None, ge=1, le=64)  # NVCC_THREADS (default: derived like max_jobs)


class AptPackages(Model):
    build: list[str] = []
    runtime: list[str] = []

    @field_validator("build", "runtime")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            matches(APT_PACKAGE, name, "a Debian package name (optionally =version)")
        return v


class Launch(Model):
    user: str = "0"  # numeric, so the host can resolve it; GPU servers run as root by default
    workdir: str = "/workspace"  # WORKDIR of the image
    cache_dirs: list[str] = []  # created in the image (no VOLUME: mount what should persist)
    default: Optional[str] = None  # the profile the image runs by default (else the first declared)
    profiles: dict[str, LaunchProfile] = {}  # NAME -> /usr/local/bin/NAME, parsed at build time

    _user = pattern_field("user", USER, "a user name or numeric uid[:gid]")
    _workdir = pattern_field("workdir", ABS_DIR, "an absolute directory (letters, digits, '._-')")

    @field_validator("cache_dirs")
    @classmethod
    def _abs(cls, v: list[str]) -> list[str]:
        for d in v:
            matches(ABS_DIR, d, "an absolute cache directory (letters, digits, '._-')")
        if len(set(v)) != len(v):
            raise ValueError("cache_dirs lists a directory twice")
        return v

    @model_validator(mode="after")
    def _profiles(self) -> "Launch":
        for name, profile in self.profiles.items():
            if not NAME.match(name):
                raise PlacedValueError(
                    ("profiles", name), f"profile name {name!r} is not valid (lowercase letters, digits, '-')"
                )
            if reserved_command(name):
                raise PlacedValueError(
                    ("profiles", name),
                    f"profile name {name!r} would shadow the system command of that name "
                    f"in /usr/local/bin; choose another name",
                )
        if self.default is not None and self.default not in self.profiles:
            raise ValueError(f"default: {self.default!r} is not a profile ({', '.join(self.profiles) or 'none'})")
        return self

    def default_profile(self) -> Optional[str]:
        return self.default or next(iter(self.profiles), None)


class Variant(Model):
    """An A/B image: an ordered subset of the engine's patches and optional patches."""

    description: str = ""
    patches: list[str]  # entry ids (stack or optional) in the order they apply

    _description = printable_field("description")


class Expect(Model):
    imports: list[str] = []  # modules the smoke suite imports
    gpu_imports: list[str] = []  # modules that load the CUDA driver on import (checked with a GPU)
    versions: dict[str, str] = {}  # distribution name -> exact version
    cuda: Optional[str] = None  # torch.version.cuda and the toolkit's major.minor
    archs: list[str] = []  # SASS archs of which at least one must be present
    arch_modules: list[str] = []  # python packages whose .so files are checked for `archs`
    torchvision_pair: bool = False  # check the torch/torchvision ABI pairing

    # the smoke suite runs `import NAME` on the host it tests
    _modules = field_validator("imports", "gpu_imports", "arch_modules")(classmethod(lambda cls, v: module_names(v)))
    _cuda = pattern_field("cuda", CUDA_VERSION, "a CUDA major.minor such as 13.0")

    @field_validator("archs")
    @classmethod
    def _archs(cls, v: list[str]) -> list[str]:
        return [matches(SM_ARCH, a, "an SASS arch such as sm_90a") for a in v]

    @field_validator("versions")
    @classmethod
    def _versions(cls, v: dict[str, str]) -> dict[str, str]:
        for name, version in v.items():
            matches(DIST_NAME, name, "a distribution name")
            matches(VERSION, version, "a version such as 0.5.16")
        return v


BUILDER = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*\Z")
AOT_ARG = re.compile(r"\A[A-Za-z0-9_.+-]{1,64}\Z")


class AotKernel(Model):
    """One kernel compiled while the image builds, by the engine's own builder (tools/aot_build.py)."""

    jit: str  # the JIT kind: tvm-ffi (SGLang's jit_kernel), flashinfer (JitSpec generators), humming (host helpers)
    builder: str  # "module:function" the engine calls to build it, e.g. sglang.jit_kernel.add_constant:_jit_add_constant_module
    args: list[Union[bool, int, float, str]] = []  # its arguments; a string "torch.NAME" is that dtype

    _builder = pattern_field("builder", BUILDER, "a builder module:function")

    @field_validator("args")
    @classmethod
    def _args(cls, v: list) -> list:
        for i, arg in enumerate(v):
            if isinstance(arg, str):
                matches(AOT_ARG, arg, "an argument of letters, digits and . _ + - (at most 64)")
            elif isinstance(arg, float) and not math.isfinite(arg):  # YAML's .nan/.inf: not JSON for aot/spec.json
                raise ValueError(f"argument {i} is not a finite number ({arg!r})")
        return v


class Aot(Model):
    """Kernels the image carries compiled (a read-only seed the launcher copies into /cache)."""

    kernels: list[AotKernel] = []  # compiled in the aot stage, in order (each: jit, builder, args)
    recordings: list[str] = []  # JIT recordings (SERVEBUILD_JIT_RECORD) whose GPU-free part the build replays
    max_bytes: int = Field(default=4 << 30, ge=1 << 20, le=64 << 30)  # the seed layer's size limit

    @field_validator("recordings")
    @classmethod
    def _recordings(cls, v: list[str]) -> list[str]:
        seen: dict[str, str] = {}
        for path in v:
            matches(REL_DIR, path, "a file path relative to the project")
            # one file under two spellings (x, ./x, x/.) is one file: compare normalised paths
            key = posixpath.normpath(path)
            if key in seen:
                raise ValueError(f"{path!r} is {seen[key]!r} again: a recording is listed twice")
            seen[key] = path
        return v


class Recipe(Model):
    name: str
    description: str  # one line of free text
    extends: Optional[str] = None  # inherit from this recipe: mappings merge, lists and scalars are replaced
    _description = printable_field("description")
    platforms: list[str] = ["linux/arm64"]  # linux/arm64 and/or linux/amd64
    python: str  # checked against the base image's python3 during the build
    cuda_arch_list: str = "9.0a"  # TORCH_CUDA_ARCH_LIST for every native compile
    bases: Bases  # the two FROM images; `digest` once locked
    constraints: dict[str, str]  # platform -> hashed requirement set (every pin `==` with a sha256)
    wheels: list[str] = []  # local wheel files (air-gapped sites, local builds); still hash-checked
    apt: AptPackages = AptPackages()  # Debian packages beyond python3 + venv (build stages, runtime)
    engine: Optional[Engine] = None  # the inference server (none: a torch-only image)
    build: BuildResources = BuildResources()  # compile parallelism
    launch: Launch = Launch()  # how the image runs: user, workdir, launch profiles
    expect: Expect = Expect()  # what the smoke suite proves in the built image
    aot: Aot = Aot()  # kernels compiled while the image builds (no GPU needed)
    variants: dict[str, Variant] = {}  # NAME -> a patch stack for A/B images (`invoke bisect`, `build --variant`)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"{v!r} is not a valid recipe name (lowercase letters, digits, '-')")
        return v

    @field_validator("platforms")
    @classmethod
    def _platforms(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one platform is needed")
        for p in v:
            if p not in PLATFORMS:
                raise ValueError(f"unknown platform {p!r}; expected one of {', '.join(PLATFORMS)}")
        if len(set(v)) != len(v):
            raise ValueError("a platform is listed twice")
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        if not re.match(r"^3\.[0-9]{1,2}\Z", v):
            raise ValueError(f"{v!r} is not a Python version of the form 3.N")
        return v

    @field_validator("cuda_arch_list")
    @classmethod
    def _archs(cls, v: str) -> str:
        if not ARCH_LIST.match(v):
            raise ValueError(f"{v!r} is not a TORCH_CUDA_ARCH_LIST such as '9.0a' or '9.0;9.0a'")
        return v

    @field_validator("wheels")
    @classmethod
    def _wheels(cls, v: list[str]) -> list[str]:
        names = [w.rsplit("/", 1)[-1] for w in v]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice:  # they share one directory in the build context
            raise ValueError(f"two wheels are named {twice}")
        return v

    @model_validator(mode="after")
    def _constraints_cover_platforms(self) -> "Recipe":
        for p in self.constraints:
            if p not in PLATFORMS:
                raise ValueError(f"constraints: unknown platform {p!r}")
        missing = [p for p in self.platforms if p not in self.constraints]
        if missing:
            raise ValueError(f"constraints: no hashed requirement set for {', '.join(missing)}")
        return self

    @model_validator(mode="after")
    def _install_mode_fits(self) -> "Recipe":
        """The engine's install mode accepts its fields for these platforms."""
        if self.engine:
            self.engine.mode.validate(self.engine, self.platforms)
        return self

    @model_validator(mode="after")
    def _aot_fits_the_engine(self) -> "Recipe":
        """Each aot kernel names a JIT kind and a builder the engine kind compiles ahead of time."""
        kind = self.engine.kind if self.engine else None
        for i, kernel in enumerate(self.aot.kernels):
            jits = kind.aot_jits if kind is not None else {}
            if kernel.jit not in jits:
                raise PlacedValueError(
                    ("aot", "kernels", i, "jit"),
                    (
                        f"{kernel.jit!r} is not a JIT kind this engine compiles ahead of time "
                        f"(known: {', '.join(sorted(jits)) or 'none: the engine compiles nothing while serving'})"
                    ),
                )
            if not kernel.builder.startswith(jits[kernel.jit]):
                raise PlacedValueError(
                    ("aot", "kernels", i, "builder"),
                    f"a {kernel.jit} builder lives under {jits[kernel.jit]}, not {kernel.builder}",
                )
        if self.aot.recordings and not (kind and kind.aot_jits):
            raise PlacedValueError(("aot", "recordings"), "the engine compiles nothing ahead of time")
        return self

    @model_validator(mode="after")
    def _profiles_fit_the_engine(self) -> "Recipe":
        """Each launch profile passes its engine kind's rules (every engine's, then DSpark's as the
        kind spells it), on its flags parsed once as that engine reads them; no engine: the common rules."""
        kind = self.engine.kind if self.engine else GENERIC
        for name, profile in self.launch.profiles.items():
            try:
                kind.check_profile(name, profile)
            except ValueError as exc:
                raise PlacedValueError(("launch", "profiles", name), str(exc)) from None
        return self

    @model_validator(mode="after")
    def _stack_fits_the_engine(self) -> "Recipe":
        """Each entry's `fixes` names a defect the engine kind knows; every launch profile clears the
        known defects of the engine version that the stack does not fix (engines/<kind>.check_defects)."""
        if self.engine is None:
            return self
        kind = self.engine.kind
        for group in ("patches", "optional_patches"):
            for i, entry in enumerate(getattr(self.engine.source, group)):
                unknown = next((d for d in entry.fixes if d not in kind.defects), None)
                if unknown:
                    known = ", ".join(sorted(kind.defects)) or "none"
                    raise PlacedValueError(
                        ("engine", "source", group, i, "fixes"),
                        f"{entry.id}: {unknown!r} is not a known defect of {kind.name} (known: {known})",
                    )
        met = self.defect_met(self.engine.source.patches)
        if met:
            raise PlacedValueError(("launch", "profiles", met[0]), met[1])
        return self

    def defect_met(self, stack: list[PatchEntry]) -> Optional[tuple[str, str]]:
        """(profile, one line) for the first launch profile that meets a known defect of the engine
        version which no entry of `stack` fixes; None when every profile clears them."""
        if self.engine is None:
            return None
        fixed = frozenset(d for entry in stack for d in entry.fixes)
        for name, profile in self.launch.profiles.items():
            try:
                self.engine.kind.check_defects(name, profile, self.engine.version, fixed)
            except ValueError as exc:
                return name, f"recipe {self.name!r}, {exc}"
        return None

    @model_validator(mode="after")
    def _variants(self) -> "Recipe":
        if self.variants and self.engine is None:
            raise ValueError("variants: a recipe without an engine has no patch stack to vary")
        for name, variant in self.variants.items():
            if not NAME.match(name):
                raise ValueError(f"variants: {name!r} is not a valid variant name")
            pool = self.engine.source.entries()
            unknown = [i for i in variant.patches if i not in pool]
            if unknown:
                raise ValueError(f"variants.{name}: unknown patch {unknown[0]!r} (known: {', '.join(pool)})")
            check_stack([pool[i] for i in variant.patches], where=f"variants.{name}: ")
            met = self.defect_met([pool[i] for i in variant.patches])
            if met:
                raise ValueError(f"variants.{name}: {met[1]}")
        return self

    def with_variant(self, name: str) -> "Recipe":
        """This recipe with the variant's stack as its patch stack."""
        if name not in self.variants:
            known = ", ".join(sorted(self.variants)) or "none"
            raise InputError(f"unknown variant {name!r}; this recipe has: {known}", field="--variant")
        return self.with_stack(self.variants[name].patches)

    def with_stack(self, ids: list[str]) -> "Recipe":
        """This recipe with the given entries (stack or optional, in order) as its patch stack."""
        pool = self.engine.source.entries()
        unknown = [i for i in ids if i not in pool]
        if unknown:
            raise InputError(f"unknown patch {unknown[0]!r} (known: {', '.join(pool)})", field="--patches")
        try:
            check_stack([pool[i] for i in ids])
        except ValueError as exc:
            raise InputError(str(exc), field="--patches") from None
        met = self.defect_met([pool[i] for i in ids])
        if met:
            raise InputError(met[1], field="--patches")
        source = self.engine.source.model_copy(update={"patches": [pool[i] for i in ids]})
        return self.model_copy(update={"engine": self.engine.model_copy(update={"source": source})})
