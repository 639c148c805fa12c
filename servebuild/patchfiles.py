"""What a path in a patch is: native (compiled when the package is built), test/doc, or Python."""

from __future__ import annotations

import re

# compiled (or build-configuring) when a wheel is built: a mode that reuses compiled parts cannot carry them
NATIVE = re.compile(
    r"(\.(c|cc|cpp|cxx|cu|cuh|h|hh|hpp|inc|pyx|pxd|rs|proto|cmake)$"
    r"|(^|/)(CMakeLists\.txt|setup\.py|setup\.cfg|pyproject\.toml|Cargo\.toml|Cargo\.lock|build\.rs)$"
    r"|(^|/)csrc/)")
TEST_OR_DOC = re.compile(r"((^|/)(tests?|docs?|benchmarks?|examples?)/|(^|/)test_[^/]*\.py$|\.(md|rst)$)")


def is_native(path: str) -> bool:
    return bool(NATIVE.search(path))


def is_test_or_doc(path: str) -> bool:
    return bool(TEST_OR_DOC.search(path))
