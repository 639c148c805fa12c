"""Structure facts for a servebuild tree: largest modules and functions, and import cycles.

Usage: python scripts/structure.py [PACKAGE_DIR]   (default: servebuild)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def facts(pkg: Path) -> dict:
    modules, functions, imports = {}, [], {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg.parent).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
        text = path.read_text()
        modules[rel] = len(text.splitlines())
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((node.end_lineno - node.lineno + 1, f"{rel}.{node.name}"))
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = rel.split(".")[: len(rel.split(".")) - node.level + (1 if path.name == "__init__.py" else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
                deps.add(target)
                deps.update(f"{target}.{alias.name}" for alias in node.names)  # `from . import module`
        imports[rel] = {d for d in deps if d != rel}
    imports = {m: {d for d in deps if d in imports or "." in d} for m, deps in imports.items()}
    return {"modules": modules, "functions": sorted(functions, reverse=True), "imports": imports}


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node, stack):
        state[node] = 1
        for dep in sorted(imports.get(node, ())):
            if dep not in imports:
                continue  # a name imported from a module, not a module
            if state.get(dep) == 1:
                found.append(stack[stack.index(dep):] + [dep])
            elif dep in imports and not state.get(dep):
                visit(dep, stack + [dep])
        state[node] = 2

    for module in sorted(imports):
        if not state.get(module):
            visit(module, [module])
    return found


if __name__ == "__main__":
    f = facts(Path(sys.argv[1] if len(sys.argv) > 1 else "servebuild"))
    mods = sorted(f["modules"].items(), key=lambda kv: -kv[1])
    print(f"modules: {len(mods)}, lines: {sum(f['modules'].values())}")
    print("largest modules:", ", ".join(f"{m} {n}" for m, n in mods[:4]))
    print("largest functions:", ", ".join(f"{name} {n}" for n, name in f["functions"][:4]))
    print("import cycles (module level, relative imports):", cycles(f["imports"]) or "none")
