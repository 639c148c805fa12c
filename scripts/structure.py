"""Structure facts for a servebuild tree, for the layering issue's before/after figures.

Usage:
  python scripts/structure.py [ROOT]            static facts of ROOT/servebuild and ROOT/tasks.py
  python scripts/structure.py [ROOT] --trace -- INVOKE-ARGS...
                                                 the same, plus a trace of one command run in this process
                                                 (e.g. -- build --recipe sglang-native-fp8-bookworm
                                                  --variant local-stack)

Static facts: modules per package, lines, the largest modules and functions, the longest chain of
module-level imports, imports inside functions, tasks.py lines. The trace counts the servebuild
modules the command enters, how often control moves from one module to another and back to one
it had left (back-and-forth moves), the templates Jinja loads, and how often a whole Recipe is
validated. ROOT defaults to this checkout; point it at a worktree of an older commit to compare.
"""

from __future__ import annotations

import ast
import os
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path


def module_name(path: Path, pkg: Path) -> str:
    return path.relative_to(pkg.parent).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")


def static_facts(pkg: Path) -> dict:
    modules, functions, graph, nested = {}, [], {}, []
    for path in sorted(pkg.rglob("*.py")):
        name = module_name(path, pkg)
        text = path.read_text()
        modules[name] = len(text.splitlines())
        tree = ast.parse(text)
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        inner = {
            id(n)
            for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(fn)
            if n is not fn
        }
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
            if isinstance(node, ast.ImportFrom):
                base = (
                    ".".join(here[: len(here) - node.level + 1] + [node.module or ""]).strip(".")
                    if node.level
                    else (node.module or "")
                )
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            ours = [t for t in targets if t == "servebuild" or t.startswith("servebuild.")]
            if id(node) in inner and ours:
                nested.append(f"{name}:{node.lineno} -> {ours[0]}")
            elif id(node) not in inner:
                deps.update(ours)
        graph[name] = deps
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    packages = Counter(
        m.split(".")[1] if (pkg / m.split(".")[1]).is_dir() else "(top level)" for m in modules if m != "servebuild"
    )
    return {
        "modules": modules,
        "functions": sorted(functions, reverse=True),
        "graph": graph,
        "nested": nested,
        "packages": packages,
    }


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    @lru_cache(maxsize=None)
    def from_(node: str, seen: frozenset) -> tuple[str, ...]:
        best: tuple[str, ...] = (node,)
        for dep in sorted(graph.get(node, ())):
            if dep not in seen:
                chain = (node,) + from_(dep, seen | {dep})
                if len(chain) > len(best):
                    best = chain
        return best

    return list(max((from_(m, frozenset({m})) for m in sorted(graph)), key=len))


def print_static(root: Path) -> None:
    f = static_facts(root / "servebuild")
    mods = sorted(f["modules"].items(), key=lambda kv: -kv[1])
    tops = sorted(
        p.name
        for p in (root / "servebuild").iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__pycache__"
    )
    chain = longest_chain(f["graph"])
    print(f"modules: {len(mods)}, lines: {sum(f['modules'].values())}")
    print(f"top level of servebuild/ ({len(tops)} entries): {' '.join(tops)}")
    print("modules per package:", ", ".join(f"{k} {v}" for k, v in sorted(f["packages"].items())))
    print("largest modules:", ", ".join(f"{m} {n}" for m, n in mods[:4]))
    print("largest functions:", ", ".join(f"{name} {n}" for n, name in f["functions"][:4]))
    print(f"longest import chain: {len(chain)} modules ({' -> '.join(c.removeprefix('servebuild.') for c in chain)})")
    layer = {m: m.split(".")[1] if m.count(".") else m for m in f["graph"]}
    packaged = {}
    for m, deps in f["graph"].items():
        packaged.setdefault(layer[m], set()).update(layer[d] for d in deps if layer[d] != layer[m])
    pchain = longest_chain(packaged)
    print(f"longest chain of packages: {len(pchain)} ({' -> '.join(pchain)})")
    print(
        f"servebuild imports inside functions: {len(f['nested'])}"
        + (f" ({', '.join(f['nested'])})" if f["nested"] else "")
    )
    tasks = root / "tasks.py"
    if tasks.exists():
        print(f"tasks.py: {len(tasks.read_text().splitlines())} lines")


def trace(root: Path, argv: list[str]) -> None:
    sys.path.insert(0, str(root))
    os.chdir(root)
    import jinja2
    from invoke import Program

    pkg = str(root / "servebuild") + os.sep
    sequence: list[str] = []
    templates: list[str] = []
    validations = Counter()

    def profile(frame, event, arg):
        if event == "call":
            filename = frame.f_code.co_filename
            if filename.startswith(pkg) and filename.endswith(".py") and frame.f_code.co_name != "<module>":
                name = module_name(Path(filename), root / "servebuild")
                if not sequence or sequence[-1] != name:
                    sequence.append(name)

    original = jinja2.FileSystemLoader.get_source

    def get_source(self, environment, template):
        templates.append(template)
        return original(self, environment, template)

    jinja2.FileSystemLoader.get_source = get_source
    recipe_module = __import__(
        "servebuild.recipe.schema" if (root / "servebuild/recipe/schema.py").exists() else "servebuild.recipe",
        fromlist=["Recipe"],
    )
    real = recipe_module.Recipe.model_validate.__func__

    def counted(cls, *args, **kwargs):
        validations[cls.__name__] += 1
        return real(cls, *args, **kwargs)

    recipe_module.Recipe.model_validate = classmethod(counted)
    import importlib  # import everything first: the trace counts what the command calls, not import-time code

    for path in sorted((root / "servebuild").rglob("*.py")):
        name = module_name(path, root / "servebuild")
        if ".tools" not in name and not name.endswith(".argcheck") and name != "servebuild.layers":
            importlib.import_module(name)
    importlib.import_module("tasks")
    sys.setprofile(profile)
    try:
        Program().run(["invoke", "-r", str(root), *argv], exit=False)
    finally:
        sys.setprofile(None)
    left, back, pairs = set(), 0, Counter()
    for prev, cur in zip(sequence, sequence[1:]):
        left.add(prev)
        back += cur in left
        pairs[tuple(sorted((prev, cur)))] += cur in left
    print(f"trace of `invoke {' '.join(argv)}`:")
    print(
        f"  servebuild modules entered: {len(set(sequence))} ({', '.join(sorted(m.removeprefix('servebuild.') for m in set(sequence)))})"
    )
    print(f"  moves between modules: {len(sequence) - 1}, of them back to a module already left: {back}")
    top = ", ".join(
        f"{a.removeprefix('servebuild.')}<->{b.removeprefix('servebuild.')} {n}" for (a, b), n in pairs.most_common(6)
    )
    print(f"  most moves back, by pair: {top}")
    print(f"  templates loaded: {len(set(templates))} ({len(templates)} loads)")
    print(f"  whole-Recipe validations: {validations['Recipe']}")


if __name__ == "__main__":
    args = sys.argv[1:]
    command = args[args.index("--") + 1 :] if "--" in args else []
    args = args[: args.index("--")] if "--" in args else args
    root = Path(next((a for a in args if not a.startswith("--")), Path(__file__).resolve().parents[1])).resolve()
    print_static(root)
    if "--trace" in args:
        trace(root, command)
