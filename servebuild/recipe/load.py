"""Load a recipe: read YAML (with the line of every field), follow `extends` (recipe/inherit.py), validate,
check files."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from servebuild.recipe.requirements import check_hashed_requirements, cuda_compiler_problem, normalize, parse_pins
from servebuild.errors import InputError, PlacedValueError, RecipeError, ServebuildError
from servebuild.fsutil import canonical_json, check_input, named_problem, read_input, read_small_text, sha256_bytes
from servebuild.recipe.grammar import NAME
from servebuild.recipe.inherit import merged_recipe
from servebuild.recipe.schema import Recipe
from servebuild.recipe.files import escape_problem, named_files
from servebuild.yamlfile import parse_bounded


class RecipeFile:
    """One YAML file as read: its data, its hash and where each field sits."""

    def __init__(self, path: Path, display: str):
        self.path = path
        self.display = display
        text = read_small_text(path, display)
        raw = text.encode("utf-8")
        self.data, self.lines = parse_bounded(text, display)
        if not isinstance(self.data, dict):
            raise RecipeError("a recipe is a YAML mapping of fields", file=display)
        self.text_sha256 = sha256_bytes(raw)


def recipe_hash(chain: list[RecipeFile]) -> str:
    """The recipe as written: the bytes of its files (child first). Growing the schema with
    defaulted fields changes no file, so it stales no lock."""
    return sha256_bytes(canonical_json([f.text_sha256 for f in chain]).encode())


class LoadedRecipe:
    """A validated recipe plus the chain of files it came from."""

    def __init__(
        self,
        recipe: Recipe,
        chain: list[RecipeFile],
        root: Path,
        sha256: Optional[str] = None,
        variant: Optional[str] = None,
    ):
        self.recipe = recipe
        self.chain = chain  # child first
        self.root = root
        self.sha256 = sha256 or recipe_hash(chain)
        self.variant = variant

    def replace(self, recipe: Recipe, variant: Optional[str] = None) -> "LoadedRecipe":
        return LoadedRecipe(recipe, self.chain, self.root, self.sha256, variant or self.variant)

    def with_variant(self, name: str) -> "LoadedRecipe":
        try:
            return self.replace(self.recipe.with_variant(name), variant=name)
        except InputError as exc:  # the schema placed it at --variant; the recipe file says which exist
            raise RecipeError(exc.problem, file=self.file, field="variants") from None

    @property
    def file(self) -> str:
        return self.chain[0].display

    def place(self, loc: tuple, message: str) -> RecipeError:
        return _place(self.chain, loc, message)


def recipe_path(name_or_path: str, recipes_dir: Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        return candidate
    if not NAME.match(name_or_path):
        raise RecipeError(f"{name_or_path!r} is not a recipe name or a .yaml path", field="recipe")
    path = recipes_dir / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in recipes_dir.glob("*.yaml") if not p.stem.endswith((".lock", ".ids"))))
        raise RecipeError(
            f"unknown recipe {name_or_path!r}; known recipes: {known or 'none'}", file=str(recipes_dir), field="recipe"
        )
    return path


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def check_link_inside(path: Path, root: Path) -> None:
    """A file of the project (recipes/NAME.yaml, its lock) that is a symlink resolving outside the
    project is refused: what the project holds must not be another tree's file. Links inside stay allowed."""
    absolute = path.absolute()
    if absolute.is_relative_to(root.absolute()) and not path.resolve().is_relative_to(root.resolve()):
        raise RecipeError(
            f"is a symlink to {path.resolve()}, outside the project; copy the file into the project "
            f"or link to a file inside it",
            file=str(absolute.relative_to(root.absolute())),
        )


def read_chain(path: Path, root: Path) -> list[RecipeFile]:
    """The recipe file and every file it extends, child first."""
    chain: list[RecipeFile] = []
    seen: list[str] = []
    while True:
        check_link_inside(path, root)
        rf = RecipeFile(path, _display(path, root))
        chain.append(rf)
        seen.append(str(path.resolve()))
        parent = rf.data.get("extends")
        if parent is None:
            return chain
        where = dict(file=rf.display, field="extends", line=rf.lines.get(("extends",)))
        if not isinstance(parent, str) or not NAME.match(parent):  # a name in the same directory, no path
            raise RecipeError(f"{parent!r} is not a recipe name (a recipe in the same directory)", **where)
        try:
            path = recipe_path(parent, path.parent)
        except RecipeError as exc:
            raise RecipeError(exc.problem, **where) from None
        if str(path.resolve()) in seen:
            cycle = " -> ".join([str(c.data.get("name", c.display)) for c in chain] + [parent])
            raise RecipeError(f"cyclic extends: {cycle}", **where)


def load_recipe(name_or_path: str, root: Path, recipes_dir: Optional[Path] = None) -> LoadedRecipe:
    """Load a recipe by name (from `recipes_dir`) or path, follow `extends`, validate it all."""
    chain = read_chain(recipe_path(name_or_path, recipes_dir or root / "recipes"), root)
    try:
        merged = merged_recipe([rf.data for rf in chain])
    except PlacedValueError as exc:
        raise _place(chain, exc.loc, str(exc)) from None
    merged["extends"] = chain[0].data.get("extends")
    if chain[0].data.get("name") is None:
        merged.pop("name", None)  # a child must name itself, not inherit the parent's name
    try:
        recipe = Recipe.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, PlacedValueError):  # a validator named the field below its model
            raise _place(chain, tuple(err["loc"]) + inner.loc, str(inner)) from None
        raise _place(chain, tuple(err["loc"]), _message(err)) from None
    stem = chain[0].path.stem
    if recipe.name != stem:
        # the name picks the build directory, the default tag and the lock: a file elsewhere that
        # borrows another recipe's name would overwrite that recipe's builds and verdicts
        raise _place(
            chain,
            ("name",),
            f"the recipe in {chain[0].path.name} must be named {stem!r} (its file name), not {recipe.name!r}",
        )
    loaded = LoadedRecipe(recipe, chain, root)
    check_files(loaded)
    return loaded


def _message(err: dict) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    return err["msg"].removeprefix("Value error, ")


def _place(chain: list[RecipeFile], loc: tuple, message: str) -> RecipeError:
    field = ".".join(str(p) for p in loc) or "(top level)"
    # the file (child first) that sets the deepest part of the failing path
    for depth in range(len(loc), -1, -1):
        for rf in chain:
            if loc[:depth] in rf.lines and (depth > 0 or rf is chain[0]):
                return RecipeError(message, file=rf.display, field=field, line=rf.lines[loc[:depth]])
    return RecipeError(message, file=chain[0].display, field=field)


def check_files(loaded: LoadedRecipe) -> None:
    """Every file the recipe names is inside the project, exists, is a regular file within the
    limits of its kind (fsutil.LIMITS), and is what the recipe says."""
    for f in named_files(loaded.recipe):
        problem = escape_problem(f.path, loaded.root)
        path = loaded.root / f.path
        if problem is None and not path.exists():
            problem = f"file {f.path} does not exist"
        loc = f.loc
        if problem is None:
            try:
                loc, problem = _file_problem(loaded, f, path)
            except ServebuildError as exc:  # the reader's refusal: over the limit, not a regular file, not UTF-8
                problem = named_problem(f.path, exc.problem)
        if problem:
            raise _place(loaded.chain, loc, problem)


def _file_problem(loaded: LoadedRecipe, f, path: Path) -> tuple[tuple, Optional[str]]:
    """(field, what is wrong) for one named file that exists inside the project (None: nothing)."""
    check_input(path, KIND_OF[f.kind], f.path)
    if f.kind == "requirements":
        problem = check_hashed_requirements(path, f.path)
        if problem is None and loaded.recipe.expect.cuda:  # nvcc 13.1-13.3 miscompile DSV4 on sm_90a
            problem = cuda_compiler_problem(parse_pins(path), loaded.recipe.expect.cuda)
        if problem is None and f.loc[0] == "engine":
            return f.loc, _release_version_problem(loaded.recipe.engine, path, f.path)
        return f.loc, (f"{f.path}: {problem}" if problem else None)
    if f.kind == "wheel" and not f.path.endswith(".whl"):
        return f.loc, f"{f.path} is not a .whl file"
    if f.kind == "patch":
        digest = sha256_bytes(read_input(path, "patch", f.path))
        if digest != f.sha256:
            return f.loc[:-1] + ("sha256",), (
                f"patch sha256 mismatch for {f.entry}: recipe says {f.sha256}, {f.path} hashes to {digest}"
            )
    return f.loc, None


# the reader's kind (fsutil.LIMITS) of each kind of named file
KIND_OF = {"requirements": "requirements", "wheel": "artifact", "patch": "patch", "recording": "recording"}


def _release_version_problem(engine, path: Path, rel: str) -> Optional[str]:
    """The release artifact a mode installs (precompiled wheel, sdist) must be engine.version:
    the image's version label and the relabelled dist-info are derived from it."""
    pinned = parse_pins(path).get(normalize(engine.name))
    if pinned is not None and pinned != engine.version:
        return f"{rel} pins {engine.name}=={pinned}, but engine.version is {engine.version}"
    return None
