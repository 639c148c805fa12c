"""pip-source: build and install the patched tree from source (native patches allowed)."""

from __future__ import annotations

from servebuild.modes.base import RELABEL_TOOL, Fragment, InstallMode


class PipSource(InstallMode):
    name = "pip-source"
    compiles = True
    accepts_native_patches = True
    help = "pip builds the patched tree (native code compiled for cuda_arch_list)"

    def context_files(self, engine, platform):
        return dict(RELABEL_TOOL)  # a build backend may ignore SETUPTOOLS_SCM_PRETEND_VERSION

    def fragment(self, engine, platform):
        return Fragment("modes/pip-source.j2")


MODE = PipSource()
