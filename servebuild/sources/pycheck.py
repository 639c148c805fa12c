"""A static check of a patched tree's Python, on the host at fetch time: every .py file the stack changes
compiles, and every import that names a module of the tree finds that module and, for `from X import
name`, a `name` that X defines (def, class, assignment, import, `__all__`) or a submodule X.name.

It reads the changed files and the files that may import a changed module (their text names one), and
never imports anything. What it cannot tell statically it leaves alone: a module with a star import,
a module `__getattr__`, `globals()` or `sys.modules` games, compiled extensions, modules outside the
tree (torch, the standard library), imports guarded by `try: ... except ImportError` or `if
TYPE_CHECKING:`. The caller keeps only findings the unpatched tree does not have, so what the base
already does (a generated module, an optional dependency) is never held against a patch.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
DYNAMIC = re.compile(r"\bglobals\(\)|\bsys\.modules\[|\bvars\(\)\[")
EXTENSIONS = (".so", ".pyd", ".pyx")  # a compiled module: present, not readable here


@dataclass(frozen=True)
class Finding:
    path: str  # the file, relative to the tree
    line: int
    kind: str  # "syntax", "module" (no such module in the tree) or "name" (the module lacks the name)
    module: str = ""
    name: str = ""
    detail: str = ""  # the compiler's message; for "name", the file of the module
    text: str = ""  # the statement's first line as written

    def key(self) -> tuple:
        """Line numbers move when a patch adds lines above: the same finding on the base has the same key."""
        return (self.path, self.kind, self.module, self.name)

    def shown(self) -> str:
        if self.kind == "syntax":
            return f"{self.path} line {self.line} does not compile: {self.detail}"
        if self.kind == "module":
            return f"{self.path} line {self.line} imports {self.module}, a module the patched tree does not have"
        return (
            f"{self.path} line {self.line} imports {self.name} from {self.module}, which {self.detail} does not define"
        )


@dataclass(frozen=True)
class Module:
    kind: str  # "file", "package", "namespace" or "extension"
    path: str  # the .py file (a package's __init__.py), the directory, or the extension file


def _guarded(handlers: list[ast.ExceptHandler]) -> bool:
    for h in handlers:
        if h.type is None:
            return True
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        names = {t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "" for t in types}
        if names & GUARDS:
            return True
    return False


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _suppresses_import_errors(node: ast.With | ast.AsyncWith) -> bool:
    for item in node.items:
        call = item.context_expr
        if isinstance(call, ast.Call) and any(isinstance(a, (ast.Name, ast.Attribute)) for a in call.args):
            func = call.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            args = {a.id if isinstance(a, ast.Name) else getattr(a, "attr", "") for a in call.args}
            if name == "suppress" and args & GUARDS:
                return True
    return False


def imports(module: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that runs unguarded when its code runs (in functions too: those fail when
    the function is called, which is serve time)."""
    out: list = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
            return
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            if not _guarded(node.handlers):
                for child in node.body:
                    visit(child)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child)
            return
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.With, ast.AsyncWith)) and _suppresses_import_errors(node):
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(module)
    return out


def defined_names(module: ast.Module, text: str) -> Optional[set[str]]:
    """The names a module binds at its top level (conditionally too), or None when it can bind names no
    static reading sees (a star import, a module __getattr__, globals() or sys.modules games)."""
    if DYNAMIC.search(text):
        return None
    names: set[str] = set()

    def visit(node: ast.AST) -> bool:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(child.name)
                names.update(n for g in ast.walk(child) if isinstance(g, ast.Global) for n in g.names)
                continue
            if isinstance(child, ast.Lambda):
                continue
            if isinstance(child, ast.ImportFrom):
                for alias in child.names:
                    if alias.name == "*":
                        return False
                    names.add(alias.asname or alias.name)
            elif isinstance(child, ast.Import):
                names.update(alias.asname or alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.add(child.id)
            elif isinstance(child, ast.ExceptHandler) and child.name:
                names.add(child.name)
            elif type(child).__name__ in ("MatchAs", "MatchStar") and getattr(child, "name", None):
                names.add(child.name)
            elif type(child).__name__ == "MatchMapping" and getattr(child, "rest", None):
                names.add(child.rest)
            if not visit(child):
                return False
        return True

    if not visit(module) or "__getattr__" in names:
        return None
    for node in module.body:  # names `__all__` lists: a module that makes them some other way says so there
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and isinstance(
            node.value, (ast.List, ast.Tuple)
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names.update(
                    e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                )
    return names


class Tree:
    """A source tree's modules, found as Python would find them on a path entry of the tree."""

    def __init__(self, root: Path, subdir: str = "."):
        self.root = root
        self.subdir = subdir.strip("/") or "."
        self._parsed: dict[str, Optional[tuple[ast.Module, str]]] = {}
        self._found: dict[tuple[str, str], Optional[Module]] = {}

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def parsed(self, rel: str) -> Optional[tuple[ast.Module, str]]:
        if rel not in self._parsed:
            try:
                text = (self.root / rel).read_text(encoding="utf-8")
                self._parsed[rel] = (ast.parse(text, filename=rel), text)
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                self._parsed[rel] = None
        return self._parsed[rel]

    def package_root(self, rel: str) -> tuple[str, list[str]]:
        """(the path entry the file's package hangs from, the file's package as parts)."""
        parts = rel.split("/")[:-1]
        package: list[str] = []
        while parts and (self.root / "/".join(parts) / "__init__.py").is_file():
            package.insert(0, parts.pop())
        return "/".join(parts) or ".", package

    def module_name(self, rel: str) -> Optional[str]:
        root, package = self.package_root(rel)
        stem = rel.rsplit("/", 1)[-1].removesuffix(".py")
        parts = package if stem == "__init__" else [*package, stem]
        return ".".join(parts) or None

    def find(self, root: str, dotted: str) -> Optional[Module]:
        key = (root, dotted)
        if key not in self._found:
            self._found[key] = self._find(root, dotted)
        return self._found[key]

    def _find(self, root: str, dotted: str) -> Optional[Module]:
        base = self.root if root == "." else self.root / root
        parts = dotted.split(".")
        here = base
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            rel = os.path.relpath(here / part, self.root)
            if (here / part).is_dir():
                if last:
                    init = here / part / "__init__.py"
                    if init.is_file():
                        return Module("package", f"{rel}/__init__.py")
                    return Module("namespace", rel)
                here = here / part
                continue
            if last and (here / f"{part}.py").is_file():
                return Module("file", f"{rel}.py")
            if last and any(p.name.split(".")[0] == part and p.name.endswith(EXTENSIONS) for p in self._ls(here)):
                return Module("extension", rel)
            return None
        return None

    @staticmethod
    def _ls(folder: Path) -> list[Path]:
        try:
            return list(folder.iterdir())
        except OSError:
            return []

    def roots_for(self, rel: str) -> list[str]:
        own, _ = self.package_root(rel)
        return list(dict.fromkeys([own, self.subdir]))

    def has_top(self, root: str, top: str) -> bool:
        base = self.root if root == "." else self.root / root
        return (
            (base / top).is_dir()
            or (base / f"{top}.py").is_file()
            or any(p.name.split(".")[0] == top and p.name.endswith(EXTENSIONS) for p in self._ls(base))
        )

    def check_file(self, rel: str, compile_it: bool) -> list[Finding]:
        """The file's findings: it compiles (if asked), and each import into the tree resolves."""
        found: list[Finding] = []
        if compile_it:
            try:
                source = (self.root / rel).read_bytes()
                compile(source, rel, "exec", dont_inherit=True)
            except SyntaxError as exc:
                return [Finding(rel, exc.lineno or 0, "syntax", detail=" ".join(str(exc.msg).split()))]
            except (OSError, ValueError) as exc:
                return [Finding(rel, 0, "syntax", detail=" ".join(str(exc).split()))]
        parsed = self.parsed(rel)
        if parsed is None:
            return found
        module, text = parsed
        lines = text.splitlines()
        for node in imports(module):
            found += self._check_import(rel, node, lines[node.lineno - 1].strip() if node.lineno <= len(lines) else "")
        return found

    def _check_import(self, rel: str, node: ast.Import | ast.ImportFrom, text: str) -> list[Finding]:
        if isinstance(node, ast.Import):
            out = []
            for alias in node.names:
                where = self._resolve_absolute(rel, alias.name)
                if where is not None and where[1] is None:
                    out.append(Finding(rel, node.lineno, "module", module=alias.name, text=text))
            return out
        if node.level:
            root, package = self.package_root(rel)
            if not package or node.level > len(package):
                return []  # not in a package, or above its top: Python refuses it; not ours to judge
            parts = package[: len(package) - node.level + 1]
            dotted = ".".join(parts + ([node.module] if node.module else []))
            found = self.find(root, dotted)
            if found is None:
                return [Finding(rel, node.lineno, "module", module=dotted, text=text)]
            return self._check_names(rel, node, dotted, root, found, text)
        if node.module is None:
            return []
        where = self._resolve_absolute(rel, node.module)
        if where is None:
            return []
        root, found = where
        if found is None:
            return [Finding(rel, node.lineno, "module", module=node.module, text=text)]
        return self._check_names(rel, node, node.module, root, found, text)

    def _resolve_absolute(self, rel: str, dotted: str) -> Optional[tuple[str, Optional[Module]]]:
        """(path entry, the module or None if that entry lacks it) for a module whose top-level package
        the tree has; None for a module from outside the tree."""
        top = dotted.split(".")[0]
        for root in self.roots_for(rel):
            if self.has_top(root, top):
                return root, self.find(root, dotted)
        return None

    def _check_names(
        self, rel: str, node: ast.ImportFrom, dotted: str, root: str, found: Module, text: str
    ) -> list[Finding]:
        if found.kind == "extension":
            return []
        names: Optional[set[str]] = set()
        if found.kind in ("file", "package"):
            parsed = self.parsed(found.path)
            names = None if parsed is None else defined_names(*parsed)
        if names is None:
            return []
        out = []
        for alias in node.names:
            if alias.name == "*" or alias.name in names:
                continue
            if found.kind != "file" and self.find(root, f"{dotted}.{alias.name}") is not None:
                continue  # a submodule
            out.append(Finding(rel, node.lineno, "name", module=dotted, name=alias.name, detail=found.path, text=text))
        return out


def python_files(tree: Path, subdir: str) -> list[str]:
    base = tree if subdir in (".", "") else tree / subdir
    out = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        out += [os.path.relpath(os.path.join(folder, f), tree) for f in sorted(files) if f.endswith(".py")]
    return out


def scope(tree: Path, subdir: str, changed: list[str]) -> list[str]:
    """The files to read: the changed .py files under `subdir` that the tree still has, and every .py
    file there whose text names a changed module's last name (an import of it may be among them)."""
    under = subdir.strip("/")
    mine = [f for f in changed if f.endswith(".py") and (under in ("", ".") or f.startswith(under + "/"))]
    if not mine:
        return []
    t = Tree(tree, subdir)
    stems = {t.module_name(f).rsplit(".", 1)[-1] for f in mine if t.module_name(f)}
    stems |= {f.rsplit("/", 1)[-1].removesuffix(".py") for f in mine}
    stems.discard("__init__")
    pattern = re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(stems)))) if stems else None
    readers = []
    for rel in python_files(tree, subdir):
        if rel in mine:
            continue
        try:
            text = (tree / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "import" in text and pattern is not None and pattern.search(text):
            readers.append(rel)
    return sorted({f for f in mine if (tree / f).is_file()} | set(readers))


def can_compile_for(python: Optional[str]) -> bool:
    """This interpreter reads the target's grammar: it is that version or newer."""
    if not python:
        return True
    try:
        want = tuple(int(p) for p in python.split(".")[:2])
    except ValueError:
        return False
    return sys.version_info[:2] >= want


def check(tree: Path, subdir: str, files: list[str], changed: set[str], python: Optional[str]) -> list[Finding]:
    """The findings of `files` (scope()): changed files are compiled too, where this interpreter reads
    the target Python's grammar."""
    t = Tree(tree, subdir)
    compile_it = can_compile_for(python)
    out: list[Finding] = []
    for rel in files:
        if t.exists(rel):
            out += t.check_file(rel, compile_it and rel in changed)
    return out
