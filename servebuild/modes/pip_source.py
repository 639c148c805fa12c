"""pip-source: build and install the patched tree from source (native patches allowed)."""

from __future__ import annotations

from . import Fragment, InstallMode


class PipSource(InstallMode):
    name = "pip-source"
    compiles = True
    accepts_native_patches = True
    help = "pip builds the patched tree (native code compiled for cuda_arch_list)"

    def fragment(self, engine, platform):
        return Fragment("modes/pip-source.j2")


MODE = PipSource()
