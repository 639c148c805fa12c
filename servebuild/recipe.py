"""Recipe model: load YAML, resolve `extends`, validate every field before anything runs."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .constraints import check_hashed_requirements
from .errors import RecipeError
from .launch import LaunchProfile, resolve_profile_bases, validate_profile

PLATFORMS = ("linux/amd64", "linux/arm64")
SHA40 = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
ARCH_LIST = re.compile(r"^\d+\.\d+a?(;\d+\.\d+a?)*(\+PTX)?$")
IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:{}-]*(@sha256:[0-9a-f]{64})?$")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def full_sha(value: str) -> str:
    if not SHA40.match(value):
        raise ValueError(f"{value!r} is not a full 40-hex commit SHA (short or malformed)")
    return value


class BaseImage(Model):
    ref: str
    digest: Optional[str] = None  # filled by `lock`; a local image id for bootstrapped bases

    @field_validator("ref")
    @classmethod
    def _ref(cls, v: str) -> str:
        if not IMAGE_REF.match(v) or "@" in v:
            raise ValueError(f"{v!r} is not an image reference name[:tag] (put a digest in `digest`)")
        return v

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^sha256:[0-9a-f]{64}$", v):
            raise ValueError(f"{v!r} is not a digest of the form sha256:<64 hex>")
        return v


class Bases(Model):
    build: BaseImage
    runtime: BaseImage


class PatchEntry(Model):
    """One entry of a patch stack: an upstream PR (by pinned commit) or a local patch file."""

    id: str
    pr: Optional[int] = Field(default=None, gt=0)
    commit: Optional[str] = None        # full SHA of the commit carrying the PR
    commit_hint: Optional[str] = None   # short SHA from release notes; `lock` resolves it
    base: Optional[str] = None          # for a PR head: the commit the diff is taken against
    file: Optional[str] = None          # local patch, relative to the repository root
    sha256: Optional[str] = None        # of the exact diff applied
    requires: list[str] = []
    note: str = ""

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"{v!r} is not a valid id (lowercase letters, digits, '-')")
        return v

    @field_validator("commit", "base")
    @classmethod
    def _full(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else full_sha(v)

    @field_validator("commit_hint")
    @classmethod
    def _hint(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^[0-9a-f]{7,39}$", v):
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
    url: str
    commit: str
    tag: Optional[str] = None
    subdir: str = "."  # the directory of the tree that pip installs
    patches: list[PatchEntry] = []
    optional_patches: list[PatchEntry] = []  # not applied by default; variants may pick them

    @field_validator("commit")
    @classmethod
    def _commit(cls, v: str) -> str:
        return full_sha(v)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^(https?|git|ssh|file)://\S+$", v):
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
    """No duplicates; every `requires` earlier in the stack (or, without order, anywhere in it)."""
    seen: dict[str, PatchEntry] = {}
    for entry in entries:
        if entry.id in seen:
            raise ValueError(f"{where}duplicate patch entry {entry.id!r}")
        for prior in seen.values():
            same = (entry.pr is not None and entry.pr == prior.pr) or (
                entry.file is not None and entry.file == prior.file)
            if same:
                raise ValueError(f"{where}patch entry {entry.id!r} duplicates {prior.id!r}")
        seen[entry.id] = entry
    for i, entry in enumerate(entries):
        earlier = {e.id for e in entries[:i]} if order else set(seen) - {entry.id}
        for need in entry.requires:
            if need == entry.id:
                raise ValueError(f"{where}patch entry {entry.id!r} requires itself")
            if need not in earlier:
                why = ("comes later in the stack (order it first, or the requires is cyclic)"
                       if need in seen else "is not in the stack")
                raise ValueError(f"{where}patch entry {entry.id!r} requires {need!r}, which {why}")


class Engine(Model):
    name: str
    version: str
    # pip-source: build the patched tree; vllm-precompiled: the tree plus the compiled extensions of the
    # release wheel of the same commit; wheel-overlay: the release wheel with the patched Python files
    # of `overlay_from` copied over the installed package. The last two take Python-only patches.
    install: Literal["pip-source", "vllm-precompiled", "wheel-overlay"] = "pip-source"
    source: EngineSource
    precompiled: dict[str, str] = {}  # platform -> hashed requirement file of the release wheel
    overlay_from: Optional[str] = None  # wheel-overlay: the package directory in the tree, e.g. python/sglang
    native_extensions: list[str] = []  # python modules holding compiled extensions, for arch checks

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"{v!r} is not a valid engine name")
        return v


class BuildResources(Model):
    max_jobs: Optional[int] = Field(default=None, ge=1, le=512)
    nvcc_threads: Optional[int] = Field(default=None, ge=1, le=64)


class AptPackages(Model):
    build: list[str] = []
    runtime: list[str] = []


class Launch(Model):
    user: str = "0"  # numeric, so the host can resolve it; GPU servers run as root by default
    workdir: str = "/workspace"
    cache_dirs: list[str] = []
    profiles: dict[str, LaunchProfile] = {}

    @field_validator("cache_dirs")
    @classmethod
    def _abs(cls, v: list[str]) -> list[str]:
        for d in v:
            if not d.startswith("/") or " " in d:
                raise ValueError(f"cache dir {d!r} must be an absolute path without spaces")
        if len(set(v)) != len(v):
            raise ValueError("cache_dirs lists a directory twice")
        return v

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if isinstance(data, dict) and "profiles" in data:
            data = {**data, "profiles": resolve_profile_bases(data["profiles"])}
        return data

    @model_validator(mode="after")
    def _profiles(self) -> "Launch":
        for name, profile in self.profiles.items():
            if not NAME.match(name):
                raise ValueError(f"profile name {name!r} is not valid (lowercase letters, digits, '-')")
            validate_profile(name, profile)
        return self


class Variant(Model):
    """An A/B image: an ordered subset of the engine's patches and optional patches."""

    description: str = ""
    patches: list[str]


class Expect(Model):
    imports: list[str] = []
    versions: dict[str, str] = {}     # distribution name -> exact version
    cuda: Optional[str] = None        # torch.version.cuda and the toolkit's major.minor
    archs: list[str] = []             # SASS archs of which at least one must be present
    arch_modules: list[str] = []      # python packages whose .so files are checked for `archs`
    torchvision_pair: bool = False    # check the torch/torchvision ABI pairing


class Recipe(Model):
    name: str
    description: str
    extends: Optional[str] = None
    platforms: list[str] = ["linux/arm64"]
    python: str
    cuda_arch_list: str = "9.0a"
    bases: Bases
    constraints: dict[str, str]
    wheels: list[str] = []  # local wheel files (air-gapped sites, local builds); still hash-checked
    apt: AptPackages = AptPackages()
    engine: Optional[Engine] = None
    build: BuildResources = BuildResources()
    launch: Launch = Launch()
    expect: Expect = Expect()
    variants: dict[str, Variant] = {}

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
        if not re.match(r"^3\.\d{1,2}$", v):
            raise ValueError(f"{v!r} is not a Python version of the form 3.N")
        return v

    @field_validator("cuda_arch_list")
    @classmethod
    def _archs(cls, v: str) -> str:
        if not ARCH_LIST.match(v):
            raise ValueError(f"{v!r} is not a TORCH_CUDA_ARCH_LIST such as '9.0a' or '9.0;9.0a'")
        return v

    @model_validator(mode="after")
    def _constraints_cover_platforms(self) -> "Recipe":
        for p in self.constraints:
            if p not in PLATFORMS:
                raise ValueError(f"constraints: unknown platform {p!r}")
        missing = [p for p in self.platforms if p not in self.constraints]
        if missing:
            raise ValueError(f"constraints: no hashed requirement set for {', '.join(missing)}")
        if self.engine and self.engine.install == "wheel-overlay" and not self.engine.overlay_from:
            raise ValueError("engine.overlay_from: wheel-overlay needs the package directory of the tree")
        if self.engine and self.engine.install != "pip-source":
            missing = [p for p in self.platforms if p not in self.engine.precompiled]
            if missing:
                raise ValueError(f"engine.precompiled: no precompiled wheel requirement for {', '.join(missing)}")
        return self

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
        return self

    def with_variant(self, name: str) -> "Recipe":
        """This recipe with the variant's stack as its patch stack."""
        if name not in self.variants:
            known = ", ".join(sorted(self.variants)) or "none"
            raise RecipeError(f"unknown variant {name!r}; this recipe has: {known}", field="--variant")
        pool = self.engine.source.entries()
        source = self.engine.source.model_copy(update={"patches": [pool[i] for i in self.variants[name].patches]})
        return self.model_copy(update={"engine": self.engine.model_copy(update={"source": source})})

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


# ---------------------------------------------------------------- loading


def _line_map(text: str) -> dict[tuple, int]:
    """Map each key path of a YAML document to its 1-based line, for error places."""
    lines: dict[tuple, int] = {}

    def walk(node: yaml.Node, path: tuple) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = path + (key.value,)
                lines[child] = key.start_mark.line + 1
                walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))

    root = yaml.compose(text)
    if root is not None:
        walk(root, ())
    return lines


class RecipeFile:
    """One YAML file as read: its data and where each field sits."""

    def __init__(self, path: Path, display: str):
        self.path = path
        self.display = display
        try:
            text = path.read_text()
        except OSError as exc:
            raise RecipeError(f"cannot read recipe: {exc.strerror}", file=display) from None
        try:
            self.data = yaml.safe_load(text)
            self.lines = _line_map(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or str(exc)
            raise RecipeError(f"invalid YAML: {problem}", file=display,
                              line=mark.line + 1 if mark else None) from None
        if not isinstance(self.data, dict):
            raise RecipeError("a recipe is a YAML mapping of fields", file=display)
        self.text_sha256 = hashlib.sha256(text.encode()).hexdigest()


def deep_merge(parent: Any, child: Any) -> Any:
    """Child overrides parent; mappings merge key by key, everything else is replaced."""
    if isinstance(parent, dict) and isinstance(child, dict):
        out = dict(parent)
        for key, value in child.items():
            out[key] = deep_merge(parent[key], value) if key in parent else value
        return out
    return child


class LoadedRecipe:
    """A validated recipe plus the chain of files it came from."""

    def __init__(self, recipe: Recipe, chain: list[RecipeFile], root: Path, sha256: Optional[str] = None,
                 variant: Optional[str] = None):
        self.recipe = recipe
        self.chain = chain  # child first
        self.root = root
        # the hash of the recipe as written (a locked or variant copy keeps its recipe's hash)
        self.sha256 = sha256 or hashlib.sha256(recipe.canonical_json().encode()).hexdigest()
        self.variant = variant

    def replace(self, recipe: Recipe, variant: Optional[str] = None) -> "LoadedRecipe":
        return LoadedRecipe(recipe, self.chain, self.root, self.sha256, variant or self.variant)

    def with_variant(self, name: str) -> "LoadedRecipe":
        try:
            return self.replace(self.recipe.with_variant(name), variant=name)
        except RecipeError as exc:
            raise RecipeError(exc.problem, file=self.file, field="variants") from None

    @property
    def file(self) -> str:
        return self.chain[0].display


def recipe_path(name_or_path: str, recipes_dir: Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        return candidate
    if not NAME.match(name_or_path):
        raise RecipeError(f"{name_or_path!r} is not a recipe name or a .yaml path", field="recipe")
    path = recipes_dir / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in recipes_dir.glob("*.yaml") if not p.stem.endswith(".lock")))
        raise RecipeError(f"unknown recipe {name_or_path!r}; known recipes: {known or 'none'}",
                          file=str(recipes_dir), field="recipe")
    return path


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def load_recipe(name_or_path: str, root: Path, recipes_dir: Optional[Path] = None) -> LoadedRecipe:
    """Load a recipe by name (from `recipes_dir`) or path, follow `extends`, validate it all."""
    recipes_dir = recipes_dir or root / "recipes"
    path = recipe_path(name_or_path, recipes_dir)
    chain: list[RecipeFile] = []
    seen: list[str] = []
    while True:
        rf = RecipeFile(path, _display(path, root))
        chain.append(rf)
        seen.append(str(path.resolve()))
        parent = rf.data.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str):
            raise RecipeError("must be a recipe name", file=rf.display, field="extends",
                              line=rf.lines.get(("extends",)))
        try:
            path = recipe_path(parent, path.parent)
        except RecipeError as exc:
            raise RecipeError(exc.problem, file=rf.display, field="extends",
                              line=rf.lines.get(("extends",))) from None
        if str(path.resolve()) in seen:
            cycle = " -> ".join([c.data.get("name", c.display) for c in chain] + [parent])
            raise RecipeError(f"cyclic extends: {cycle}", file=rf.display, field="extends",
                              line=rf.lines.get(("extends",)))

    merged: dict = {}
    for rf in reversed(chain):
        merged = deep_merge(merged, rf.data)
    merged["extends"] = chain[0].data.get("extends")
    if chain[0].data.get("name") is None:
        merged.pop("name", None)  # a child must name itself, not inherit the parent's name

    try:
        recipe = Recipe.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        raise _place(chain, loc, _message(err)) from None
    loaded = LoadedRecipe(recipe, chain, root)
    _check_files(loaded)
    return loaded


def _message(err: dict) -> str:
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    return msg.removeprefix("Value error, ")


def _place(chain: list[RecipeFile], loc: tuple, message: str) -> RecipeError:
    field = ".".join(str(p) for p in loc) or "(top level)"
    # the file (child first) that sets the deepest part of the failing path
    for depth in range(len(loc), -1, -1):
        for rf in chain:
            if loc[:depth] in rf.lines and (depth > 0 or rf is chain[0]):
                return RecipeError(message, file=rf.display, field=field, line=rf.lines[loc[:depth]])
    return RecipeError(message, file=chain[0].display, field=field)


def _check_files(loaded: LoadedRecipe) -> None:
    """Files the recipe names must exist and match their recorded hashes."""
    r = loaded.recipe
    for platform, rel in sorted(r.constraints.items()):
        path = loaded.root / rel
        if not path.is_file():
            raise _place(loaded.chain, ("constraints", platform), f"file {rel} does not exist")
        problem = check_hashed_requirements(path)
        if problem:
            raise _place(loaded.chain, ("constraints", platform), f"{rel}: {problem}")
    for i, rel in enumerate(r.wheels):
        if not rel.endswith(".whl") or not (loaded.root / rel).is_file():
            raise _place(loaded.chain, ("wheels", i), f"{rel} is not an existing .whl file")
    if r.engine:
        for platform, rel in sorted(r.engine.precompiled.items()):
            path = loaded.root / rel
            problem = f"file {rel} does not exist" if not path.is_file() else check_hashed_requirements(path)
            if problem:
                raise _place(loaded.chain, ("engine", "precompiled", platform), problem)
        stacks = [("patches", r.engine.source.patches), ("optional_patches", r.engine.source.optional_patches)]
        for key, i, entry in [(k, i, e) for k, stack in stacks for i, e in enumerate(stack)]:
            if entry.file is None:
                continue
            path = loaded.root / entry.file
            loc = ("engine", "source", key, i, "file")
            if not path.is_file():
                raise _place(loaded.chain, loc, f"patch file {entry.file} does not exist")
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != entry.sha256:
                raise _place(loaded.chain, ("engine", "source", key, i, "sha256"),
                             f"patch sha256 mismatch for {entry.id}: recipe says {entry.sha256}, "
                             f"{entry.file} hashes to {digest}")
