"""The order of servebuild's packages, and the imports that break it (read by tests/unit/test_layers.py
and scripts/structure.py; nothing in the build imports this module).

A module may import only from its own package or from a package below it in LAYERS. Two names on one
rank (modes and engines) are siblings: neither imports the other. Code that runs inside images
(tools/ and each engines/<kind>/argcheck.py) imports nothing from servebuild (tools/: only the
standard library and each other). An import inside a function hides a dependency from the
reader, so it is allowed only for the optional heavy libraries in LAZY.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# rank: lowest first; the ground comes before the two extension points, then one package per station
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__",),
    ("errors",),
    ("procs",),
    ("fsutil",),
    ("yamlfile",),
    ("platforms",),
    ("patchfiles",),
    ("layers",),
    ("registry",),  # the ground
    ("modes", "engines"),  # extension points
    ("recipe",),
    ("sources",),
    ("lock",),
    ("plan",),
    ("render",),
    ("build",),
    ("check",),
    ("release",),
    ("cli",),
)
# code that runs inside images: tools/ (the standard library, and the image's own JIT packages for the tools
# that drive them: aot_build, jit_record) and each engine kind's profile-check hook, engines/<kind>/argcheck.py
# (the standard library and that engine's own package)
IN_IMAGE_HOOK = "argcheck"
LAZY = ("cryptography", "oras", "requests", "nvidia", "matplotlib")  # release's optional libraries; a probe of the
# image's wheels; matplotlib (its import writes a font cache under $HOME)
IMAGE_PACKAGES = ("torch", "sglang", "tvm_ffi", "triton", "tokenspeed_triton", "tilelang", "flashinfer")
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module (or module.name), dotted
    line: int
    nested: bool  # inside a function or class body


def module_name(path: Path, package_dir: Path) -> str:
    rel = path.relative_to(package_dir.parent).with_suffix("").as_posix().replace("/", ".")
    return rel.removesuffix(".__init__")


# module text -> its import statements as _statements gives them: tests/unit/test_layers.py reads many copies
# of one tree that differ in one file, and parsing and walking every module again was most of its time
_STATEMENTS: dict[str, list[tuple[int, Optional[str], tuple[str, ...], int, bool]]] = {}


def _statements(text: str, filename: str) -> list[tuple[int, Optional[str], tuple[str, ...], int, bool]]:
    """A module's import statements, in ast.walk's order: (level, from-module or None for `import`, the
    names, line, inside a function?)."""
    if text not in _STATEMENTS:
        tree = ast.parse(text, filename)
        nested = set()  # every node below a function, in one pass
        stack = [(tree, False)]
        while stack:
            node, inside = stack.pop()
            if inside:
                nested.add(id(node))
            below = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            stack.extend((child, below) for child in ast.iter_child_nodes(node))
        _STATEMENTS[text] = [
            (
                getattr(node, "level", 0) or 0,
                node.module if isinstance(node, ast.ImportFrom) else None,
                tuple(alias.name for alias in node.names),
                node.lineno,
                id(node) in nested,
            )
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
        ]
    return _STATEMENTS[text]


def imports(package_dir: Path) -> list[Import]:
    """Every import statement in the package's modules, relative ones made absolute."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        name = module_name(path, package_dir)
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for level, module, names, line, nested in _statements(path.read_text(), str(path)):
            if module is None and not level:  # import a, b
                targets = list(names)
            else:
                base = ".".join(here[: len(here) - level + 1] + [module or ""]).strip(".") if level else module
                targets = [f"{base}.{n}" for n in names]
            found.extend(Import(name, t, line, nested) for t in targets)
    return found


def layer_of(module: str) -> str:
    """servebuild.build.run -> build; servebuild.errors -> errors; servebuild -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def in_image(module: str) -> bool:
    parts = module.split(".")
    return module.startswith("servebuild.tools") or (
        len(parts) == 4 and parts[1] == "engines" and parts[3] == IN_IMAGE_HOOK
    )


def in_image_allows(module: str, target: str) -> bool:
    """What code that runs inside an image may import: tools/ the standard library only; an engine's
    hook also its engine's packages, which the image holds (sglang, vllm, ...)."""
    top = target.split(".")[0]
    if top in sys.stdlib_module_names or top == "__future__" or module.split(".")[1] == "engines":
        return True
    if module.startswith("servebuild.tools.") and (Path(__file__).resolve().parent / "tools" / f"{top}.py").is_file():
        return True  # a sibling tool: the images carry tools/ as one folder
    return module.split(".")[-1] in ("aot_build", "jit_record") and top in IMAGE_PACKAGES


def problems(package_dir: Path, layer=layer_of) -> list[str]:
    """One line per import that breaks the order (empty when the tree keeps it)."""
    out = []
    for imp in imports(package_dir):
        where = f"{imp.module} (line {imp.line}) imports {imp.target}"
        ours = imp.target == "servebuild" or imp.target.startswith("servebuild.")
        if in_image(imp.module):
            if ours:
                out.append(f"{where}: code that runs inside an image imports nothing from servebuild")
            elif not in_image_allows(imp.module, imp.target):
                out.append(f"{where}: tools/ runs inside images and imports only the standard library")
            continue
        if imp.target == "servebuild" and not imp.nested:
            out.append(f"{where}: import the module it uses (`import servebuild` reaches every package)")
            continue
        if imp.nested and not imp.target.startswith(LAZY):
            out.append(f"{where} inside a function: import it at the top of the module")
        if not ours or imp.target in (
            "servebuild.__version__",
            "servebuild.PACKAGE_DIR",
            "servebuild.PROJECT_DIR",
            "servebuild.TOOLS_DIR",
        ):
            continue
        src, dst = layer(imp.module), layer(imp.target)
        if src == dst:
            continue
        unplaced = [n for n in (src, dst) if n not in RANK]
        if unplaced:
            out.append(f"{where}: {unplaced[0]} has no place in servebuild.layers.LAYERS")
            continue
        if RANK[dst] > RANK[src]:
            out.append(f"{where}: {dst} is above {src} in servebuild.layers.LAYERS")
        elif RANK[dst] == RANK[src]:
            out.append(f"{where}: {src} and {dst} are siblings; neither imports the other")
    return out
