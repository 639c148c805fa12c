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
DYNAMIC = re.compile(r"\bglobals\(\)|\bsys\.modules\[|\bvars\(\)\[|\bexec\(")
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


# an import statement as written: one line, or a from-import's parenthesised list
IMPORT_STATEMENT = re.compile(
    r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)", re.M
)
STATEMENT_LISTS = ("body", "orelse", "finalbody")


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists directly inside a compound statement (except handlers and match cases too)."""
    out = [getattr(node, f) for f in STATEMENT_LISTS if isinstance(getattr(node, f, None), list)]
    out += [h.body for h in getattr(node, "handlers", [])]
    out += [c.body for c in getattr(node, "cases", [])]
    return out


def imports(module: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that runs unguarded when its code runs (in functions too: those fail when
    the function is called, which is serve time). Statements only: an import is never an expression."""
    out: list = []

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out.append(node)
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                if not _guarded(node.handlers):
                    visit(node.body)
                for block in [*(h.body for h in node.handlers), node.orelse, node.finalbody]:
                    visit(block)
            elif isinstance(node, ast.If) and _type_checking(node.test):
                visit(node.orelse)
            elif isinstance(node, (ast.With, ast.AsyncWith)) and _suppresses_import_errors(node):
                continue
            else:
                for block in _blocks(node):
                    visit(block)

    visit(module.body)
    return out


def _targets(node: Optional[ast.AST]) -> list[str]:
    """The names an assignment target binds (a, a.b no, (a, *b), [a, b])."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for elt in node.elts for n in _targets(elt)]
    return []


GLOBAL = re.compile(r"^[ \t]*global[ \t]+([\w, \t]+)", re.M)
WALRUS = re.compile(r"\b(\w+)[ \t]*:=")


def defined_names(module: ast.Module, text: str) -> Optional[set[str]]:
    """The names a module binds at its top level (conditionally too), or None when it can bind names no
    static reading sees (a star import, a module __getattr__, globals() or sys.modules games). A name a
    function declares `global`, or that a walrus binds, counts wherever it is (more names, never fewer)."""
    if DYNAMIC.search(text):
        return None
    names: set[str] = {n.strip() for m in GLOBAL.finditer(text) for n in m.group(1).split(",") if n.strip()}
    names |= set(WALRUS.findall(text))

    def visit(stmts: list[ast.stmt]) -> bool:
        for node in stmts:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                continue
            if isinstance(node, ast.ImportFrom):
                if any(alias.name == "*" for alias in node.names):
                    return False
                names.update(alias.asname or alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.Assign):
                names.update(n for t in node.targets for n in _targets(t))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
                names.update(_targets(node.target))
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                names.update(n for item in node.items for n in _targets(item.optional_vars))
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                names.update(h.name for h in node.handlers if h.name)
            elif type(node).__name__ == "Match":
                for case in node.cases:
                    for p in ast.walk(case.pattern):
                        names.update(
                            v for v in (getattr(p, "name", None), getattr(p, "rest", None)) if isinstance(v, str)
                        )
            elif type(node).__name__ == "TypeAlias":
                names.update(_targets(node.name))
            if not all(visit(block) for block in _blocks(node)):
                return False
        return True

    if not visit(module.body) or "__getattr__" in names:
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

    def __init__(self, root: Path, subdir: str = ".", python: Optional[tuple[int, int]] = None):
        self.root = root
        self.subdir = subdir.strip("/") or "."
        self.python = python  # the target's (major, minor): its grammar, where this interpreter is newer
        self._parsed: dict[str, Optional[tuple[ast.Module, str]]] = {}
        self._found: dict[tuple[str, str], Optional[Module]] = {}
        self._listed: dict[Path, list[str]] = {}
        self._names: dict[str, Optional[set[str]]] = {}

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
        """(the path entry: the installed subdir, the file's package as parts). Every directory below the
        entry is a package, regular or namespace (PEP 420), as it is once installed; a file outside the
        entry has no package."""
        base = "" if self.subdir == "." else self.subdir + "/"
        if not rel.startswith(base):
            return self.subdir, []
        return self.subdir, rel[len(base) :].split("/")[:-1]

    def module_name(self, rel: str) -> Optional[str]:
        _, package = self.package_root(rel)
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
            if not last:
                if not (here / part).is_dir():
                    return None
                here = here / part
                continue
            # the order Python's path finder takes: a regular package, a module, an extension, a namespace
            if (here / part / "__init__.py").is_file():
                return Module("package", f"{rel}/__init__.py")
            if (here / f"{part}.py").is_file():
                return Module("file", f"{rel}.py")
            if self._extension(here, part):
                return Module("extension", rel)
            if (here / part).is_dir():
                return Module("namespace", rel)
        return None

    def _ls(self, folder: Path) -> list[str]:
        if folder not in self._listed:
            try:
                self._listed[folder] = sorted(p.name for p in folder.iterdir())
            except OSError:
                self._listed[folder] = []
        return self._listed[folder]

    def _extension(self, folder: Path, name: str) -> bool:
        return any(f.split(".")[0] == name and f.endswith(EXTENSIONS) for f in self._ls(folder))

    def has_top(self, root: str, top: str) -> bool:
        base = self.root if root == "." else self.root / root
        names = self._ls(base)
        return (top in names and (base / top).is_dir()) or f"{top}.py" in names or self._extension(base, top)

    def check_file(
        self, rel: str, compile_it: bool, focus: Optional[set[str]] = None, added: Optional[set[str]] = None
    ) -> list[Finding]:
        """The file's findings: it compiles (if asked), and each import into the tree resolves (with
        `focus`, only the imports of those modules and of names from them)."""
        found: list[Finding] = []
        if compile_it:
            try:
                source = (self.root / rel).read_bytes()
                # bytes: a coding cookie is honoured, as Python does; an older target's grammar where known
                tree = ast.parse(source, rel, feature_version=self.python)
                compile(tree, rel, "exec", dont_inherit=True)  # what parsing alone lets by ('return' outside a def)
                self._parsed[rel] = (tree, source.decode("utf-8", "replace"))
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
            new = added is not None and any(
                lines[i].strip() in added
                for i in range(node.lineno - 1, min(node.end_lineno or node.lineno, len(lines)))
            )
            if focus is not None and not new and not self._touches(rel, node, focus):
                continue
            found += self._check_import(rel, node, lines[node.lineno - 1].strip() if node.lineno <= len(lines) else "")
        return found

    def check_reader(self, rel: str, focus: set[str]) -> list[Finding]:
        """An unchanged file that may import a changed module: its import statements are found by their
        text and read alone (a file is parsed whole, for its guards and lines, only when one of them looks
        wrong or cannot be read alone), so the many files that import a changed module cost little."""
        try:
            text = (self.root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return []
        for match in IMPORT_STATEMENT.finditer(text):
            try:
                nodes = ast.parse(match.group(0).strip()).body
            except (SyntaxError, ValueError):
                return self.check_file(rel, False, focus)
            for node in nodes:
                if (
                    isinstance(node, (ast.Import, ast.ImportFrom))
                    and self._touches(rel, node, focus)
                    and self._check_import(rel, node, "")
                ):
                    return self.check_file(rel, False, focus)
        return []

    def _touches(self, rel: str, node: ast.Import | ast.ImportFrom, focus: set[str]) -> bool:
        """Whether the import names a module of `focus` (or one below it), or imports a name from its parent."""

        def hit(dotted: str) -> bool:
            return any(dotted == m or dotted.startswith(m + ".") for m in focus)

        if isinstance(node, ast.Import):
            return any(hit(alias.name) for alias in node.names)
        dotted = self._dotted(rel, node)
        return dotted is not None and (hit(dotted) or any(f"{dotted}.{a.name}" in focus for a in node.names))

    def _dotted(self, rel: str, node: ast.ImportFrom) -> Optional[str]:
        """The absolute name of the module a from-import reads (None above the top of a package)."""
        if not node.level:
            return node.module
        _, package = self.package_root(rel)
        if not package or node.level > len(package):
            return None
        return ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))

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
        """(path entry, the module or None if the tree lacks it) for a module whose top-level package
        the installed subdir has; None for a module from outside the tree."""
        if not self.has_top(self.subdir, dotted.split(".")[0]):
            return None
        return self.subdir, self.find(self.subdir, dotted)

    def _check_names(
        self, rel: str, node: ast.ImportFrom, dotted: str, root: str, found: Module, text: str
    ) -> list[Finding]:
        if found.kind == "extension":
            return []
        names: Optional[set[str]] = set()
        if found.kind in ("file", "package"):
            if found.path not in self._names:
                parsed = self.parsed(found.path)
                self._names[found.path] = None if parsed is None else defined_names(*parsed)
            names = self._names[found.path]
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


def _reader_pattern(modules: set[str]) -> Optional[re.Pattern]:
    """Text that an import of one of `modules` has: its dotted name, `from PARENT import ... LAST`, or a
    relative from-import that names LAST (one line, or a parenthesised list)."""
    alternatives = []
    for m in sorted(modules):
        parent, _, last = m.rpartition(".")
        names = r"[ \t]+import[ \t]+(?:\([^)]*|[^\n]*)\b" + re.escape(last) + r"\b"
        alternatives.append(r"\b" + re.escape(m) + r"\b")
        if parent:
            alternatives.append(r"\bfrom[ \t]+" + re.escape(parent) + names)
        alternatives.append(r"\bfrom[ \t]+\.+[\w.]*\b" + re.escape(last) + r"\b[\w.]*[ \t]+import")
        alternatives.append(r"\bfrom[ \t]+\.+[\w.]*" + names)
    return re.compile("|".join(alternatives)) if alternatives else None


def changed_modules(tree: Path, subdir: str, changed: list[str]) -> set[str]:
    t = Tree(tree, subdir)
    return {m for m in (t.module_name(f) for f in python_changes(subdir, changed)) if m}


def python_changes(subdir: str, changed: list[str]) -> list[str]:
    under = subdir.strip("/")
    return [f for f in changed if f.endswith(".py") and (under in ("", ".") or f.startswith(under + "/"))]


def last_names(tree: Path, subdir: str, changed: list[str]) -> list[str]:
    """The last names of the changed modules: a file that imports one has that word in its text."""
    return sorted({m.rsplit(".", 1)[-1] for m in changed_modules(tree, subdir, changed)})


def scope(tree: Path, subdir: str, changed: list[str], candidates: Optional[list[str]] = None) -> list[str]:
    """The files to read: the changed .py files under `subdir` that the tree still has, and every .py
    file there whose text may import a changed module or a name from it (looked for among
    `candidates`, the files that have one of last_names() as a word, where the caller has them)."""
    mine = python_changes(subdir, changed)
    pattern = _reader_pattern(changed_modules(tree, subdir, changed))
    if not mine or pattern is None:
        return []
    readers = []
    for rel in python_files(tree, subdir) if candidates is None else python_changes(subdir, candidates):
        if rel in mine:
            continue
        try:
            text = (tree / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if pattern.search(text):
            readers.append(rel)
    return sorted({f for f in mine if (tree / f).is_file()} | set(readers))


def target(python: Optional[str]) -> Optional[tuple[int, int]]:
    """The recipe's "3.12" as (3, 12); None if it is not of that form."""
    m = re.match(r"^(\d+)\.(\d+)", python or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def can_compile_for(python: Optional[str]) -> bool:
    """This interpreter reads the target's grammar: it is that version or newer (the older grammar is
    then asked for: ast's feature_version)."""
    if not python:
        return True
    want = target(python)
    return want is not None and sys.version_info[:2] >= want


def added_lines(diffs: list[bytes]) -> set[str]:
    """The lines the diffs add, stripped: an import statement with one of them is new or changed."""
    return {
        line[1:].decode("utf-8", "replace").strip()
        for diff in diffs
        for line in diff.split(b"\n")
        if line.startswith(b"+") and not line.startswith(b"+++ ")
    } - {""}


def check(
    tree: Path,
    subdir: str,
    files: list[str],
    changed: set[str],
    python: Optional[str],
    added: Optional[set[str]] = None,
) -> list[Finding]:
    """The findings of `files` (scope()): changed files are compiled too, where this interpreter reads
    the target Python's grammar. With `added` (added_lines()), a changed file's imports are checked
    where the stack wrote them or where they import a changed module: an import line the stack left
    alone, of a module it left alone, fails on the patched tree only if it fails on the base."""
    t = Tree(tree, subdir, target(python) if python and can_compile_for(python) else None)
    compile_it = can_compile_for(python)
    focus = changed_modules(tree, subdir, sorted(changed))
    out: list[Finding] = []
    for rel in files:
        if not t.exists(rel):
            continue
        if rel in changed:
            out += t.check_file(rel, compile_it, None if added is None else focus, added)
        else:
            out += t.check_reader(rel, focus)
    return out
