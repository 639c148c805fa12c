"""What a path in a patch is: native (compiled when the package is built), test/doc, or Python."""

from __future__ import annotations

import re

# compiled (or build-configuring) when a wheel is built: a mode that reuses compiled parts cannot carry them
# compiled sources and build files, and compiled artifacts themselves (a binary patch that swaps a
# .so is native code as much as a .cu change)
NATIVE = re.compile(
    r"(\.(c|cc|cpp|cxx|cu|cuh|h|hh|hpp|inc|pyx|pxd|rs|proto|cmake|so|pyd|dll|dylib|o|a|cubin|ptx|fatbin)$"
    r"|\.so\.[0-9.]+$"
    r"|(^|/)(CMakeLists\.txt|setup\.py|setup\.cfg|pyproject\.toml|Cargo\.toml|Cargo\.lock|build\.rs)$"
    r"|(^|/)csrc/)"
)
TEST_OR_DOC = re.compile(r"((^|/)(tests?|docs?|benchmarks?|examples?)/|(^|/)test_[^/]*\.py$|\.(md|rst)$)")


def is_native(path: str) -> bool:
    return bool(NATIVE.search(path))


def is_test_or_doc(path: str) -> bool:
    return bool(TEST_OR_DOC.search(path))
