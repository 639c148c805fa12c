"""sources/pycheck.py, the static check of a patched tree's Python, on small trees written here: what
counts as a name a module defines, how imports resolve (absolute, relative, `import a.b as c`,
submodules, namespace packages), and what it leaves alone because no static reading can tell (star
imports, module __getattr__, guarded imports, modules from outside the tree)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from servebuild.sources import pycheck

TARGET = """
    import os
    import a.b as ab_alias
    from collections import OrderedDict as OD
    from .helpers import helper
    CONSTANT = 1
    first, (second, *rest) = 1, (2, 3)
    annotated: int = 3
    counter = 0
    counter += 1
    if os.environ.get("X"):
        conditional = 1
    else:
        def conditional():
            pass
    try:
        import fast_json as json_impl
    except ImportError:
        json_impl = None
    for loop_var in range(2):
        pass
    with open(__file__) as handle:
        pass
    class Model:
        inner = 1
    async def run():
        global late
        late = 1
    __all__ = ["listed_only"]
"""


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def findings(root: Path, changed: list[str], subdir: str = ".", python: str | None = None) -> list[str]:
    files = pycheck.scope(root, subdir, changed)
    return [f.shown() for f in pycheck.check(root, subdir, files, set(changed), python)]


def test_every_way_a_module_binds_a_name_counts(tmp_path):
    names = [
        "os", "ab_alias", "OD", "helper", "CONSTANT", "first", "second", "rest", "annotated", "counter",
        "conditional", "json_impl", "loop_var", "handle", "Model", "run", "late", "listed_only",
    ]  # fmt: skip
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/helpers.py": "def helper(): pass\n",
            "pkg/target.py": TARGET,
            "pkg/user.py": f"from pkg.target import {', '.join(names)}\n",
        },
    )
    assert findings(root, ["pkg/user.py"]) == []
    (root / "pkg/user.py").write_text("from pkg.target import CONSTANT, inner, missing\n")
    assert findings(root, ["pkg/user.py"]) == [
        "pkg/user.py line 1 imports inner from pkg.target, which pkg/target.py does not define",
        "pkg/user.py line 1 imports missing from pkg.target, which pkg/target.py does not define",
    ]


def test_imports_resolve_as_python_resolves_them(tmp_path):
    root = tree(
        tmp_path,
        {
            "src/pkg/__init__.py": "from .core import api\n",
            "src/pkg/core.py": "def api(): pass\n",
            "src/pkg/sub/__init__.py": "",
            "src/pkg/sub/leaf.py": """
                from .. import api, core, gone
                from ..core import api as a2, nothing
                from . import sibling
                from .missing_mod import x
                import pkg.core as c
                import pkg.absent
                from pkg import sub
                import torch.nn
                from numpy import definitely_not_checked
                from ... import above_the_top
                def later():
                    from pkg.core import lazily_missing
            """,
            "src/pkg/sub/sibling.py": "",
            "src/nspkg/mod.py": "X = 1\n",
            "src/pkg/uses_ns.py": "from nspkg import mod, other\nfrom nspkg.mod import X, Y\n",
        },
    )
    assert findings(root, ["src/pkg/sub/leaf.py", "src/pkg/uses_ns.py"], subdir="src") == [
        "src/pkg/sub/leaf.py line 2 imports gone from pkg, which src/pkg/__init__.py does not define",
        "src/pkg/sub/leaf.py line 3 imports nothing from pkg.core, which src/pkg/core.py does not define",
        "src/pkg/sub/leaf.py line 5 imports pkg.sub.missing_mod, a module the patched tree does not have",
        "src/pkg/sub/leaf.py line 7 imports pkg.absent, a module the patched tree does not have",
        "src/pkg/sub/leaf.py line 13 imports lazily_missing from pkg.core, which src/pkg/core.py does not define",
        "src/pkg/uses_ns.py line 1 imports other from nspkg, which src/nspkg does not define",
        "src/pkg/uses_ns.py line 2 imports Y from nspkg.mod, which src/nspkg/mod.py does not define",
    ]


@pytest.mark.parametrize(
    "target",
    [
        "from .elsewhere import *\n",  # a star import binds names no static reading sees
        "def __getattr__(name):\n    return name\n",  # PEP 562
        "globals()['made'] = 1\n",
        "import sys\nsetattr(sys.modules[__name__], 'made', 1)\n",
    ],
)
def test_a_module_that_binds_names_dynamically_is_left_alone(tmp_path, target):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/elsewhere.py": "made = 1\n",
            "pkg/dyn.py": target,
            "pkg/u.py": "from pkg.dyn import made\n",
        },
    )
    assert findings(root, ["pkg/u.py"]) == []


def test_guarded_and_type_only_imports_are_left_alone(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/u.py": """
                from typing import TYPE_CHECKING
                import contextlib
                try:
                    from pkg.optional import fast
                except ImportError:
                    fast = None
                try:
                    from pkg.optional2 import fast2
                except (ValueError, ModuleNotFoundError):
                    pass
                if TYPE_CHECKING:
                    from pkg.types_only import T
                with contextlib.suppress(ImportError):
                    from pkg.optional3 import x
                try:
                    from pkg.unguarded import y
                except ValueError:
                    pass
            """,
        },
    )
    assert findings(root, ["pkg/u.py"]) == [
        "pkg/u.py line 17 imports pkg.unguarded, a module the patched tree does not have"
    ]


def test_compiled_modules_are_present_but_not_read(tmp_path):
    root = tree(tmp_path, {"pkg/__init__.py": "", "pkg/u.py": "from pkg._native import anything\n"})
    (root / "pkg/_native.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    assert findings(root, ["pkg/u.py"]) == []


def test_unchanged_modules_that_import_a_changed_one_are_read(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/runtime.py": "def current(): pass\n",
            "pkg/models/__init__.py": "",
            "pkg/models/llama.py": "from ..runtime import declare\n",
            "pkg/models/other.py": "import os\n",
        },
    )
    assert pycheck.scope(root, ".", ["pkg/runtime.py"]) == ["pkg/models/llama.py", "pkg/runtime.py"]
    assert findings(root, ["pkg/runtime.py"]) == [
        "pkg/models/llama.py line 1 imports declare from pkg.runtime, which pkg/runtime.py does not define"
    ]


def test_only_python_under_the_installed_subdir_is_checked(tmp_path):
    root = tree(tmp_path, {"python/pkg/__init__.py": "", "test/t.py": "from pkg import gone\n"})
    assert findings(root, ["test/t.py"], subdir="python") == []


def test_a_changed_file_that_does_not_compile_is_named_with_its_line(tmp_path):
    root = tree(tmp_path, {"pkg/__init__.py": "", "pkg/bad.py": "def f(:\n    pass\n", "pkg/ret.py": "return 1\n"})
    assert findings(root, ["pkg/bad.py", "pkg/ret.py"]) == [
        "pkg/bad.py line 1 does not compile: invalid syntax",
        "pkg/ret.py line 1 does not compile: 'return' outside function",
    ]


def test_no_compile_verdict_for_a_newer_python_than_this_one(tmp_path):
    """This interpreter cannot read a newer grammar: the image's own parse step judges those files."""
    root = tree(tmp_path, {"pkg/__init__.py": "", "pkg/bad.py": "def f(:\n"})
    newer = f"{sys.version_info[0]}.{sys.version_info[1] + 1}"
    assert findings(root, ["pkg/bad.py"], python=newer) == []
    assert pycheck.can_compile_for(f"{sys.version_info[0]}.{sys.version_info[1]}")


def test_a_module_file_wins_over_a_namespace_directory_of_the_same_name(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/mod.py": "X = 1\n",
            "pkg/mod/data.txt": "",  # a directory without __init__.py: Python takes mod.py
            "pkg/u.py": "from pkg.mod import X\n",
        },
    )
    assert findings(root, ["pkg/u.py"]) == []


def test_with_the_added_lines_a_changed_file_is_checked_where_the_stack_wrote(tmp_path):
    """An import the stack left alone, of a module it left alone, is the base's business (the caller drops
    what the base has anyway); one the stack wrote, or one of a changed module, is checked."""
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/old.py": "A = 1\n",
            "pkg/changed.py": "B = 1\n",
            "pkg/u.py": "from pkg.old import gone_long_ago\nfrom pkg.old import new_name\nfrom pkg.changed import C\n",
        },
    )
    changed = ["pkg/u.py", "pkg/changed.py"]
    files = pycheck.scope(root, ".", changed)
    added = pycheck.added_lines([b"+from pkg.old import new_name\n"])
    assert [f.shown() for f in pycheck.check(root, ".", files, set(changed), None, added)] == [
        "pkg/u.py line 2 imports new_name from pkg.old, which pkg/old.py does not define",
        "pkg/u.py line 3 imports C from pkg.changed, which pkg/changed.py does not define",
    ]


def test_a_target_older_than_this_python_is_held_to_its_own_grammar(tmp_path):
    """A parenthesised context manager list is 3.9 grammar: a 3.8 target cannot read it (ast's
    feature_version), though this interpreter can."""
    root = tree(
        tmp_path, {"pkg/__init__.py": "", "pkg/w.py": "with (open('a') as a,\n      open('b') as b):\n    pass\n"}
    )
    assert findings(root, ["pkg/w.py"]) == []
    assert findings(root, ["pkg/w.py"], python="3.8") == [
        "pkg/w.py line 3 does not compile: Parenthesized context managers are only supported in Python 3.9 and greater"
    ]
