"""vllm-precompiled: the patched vLLM tree (from the release sdist) installed with the compiled
extensions of the release wheel of the same commit (VLLM_USE_PRECOMPILED). Python-only patches."""

from __future__ import annotations

from servebuild.modes.base import Fragment, InstallMode, TreeOrigin


class VllmPrecompiled(InstallMode):
    name = "vllm-precompiled"
    required_fields = ("precompiled", "sdist")
    help = "the patched tree with the release wheel's compiled extensions; no CUDA compile"

    def context_files(self, engine, platform):
        return {"precompiled.txt": engine.precompiled[platform]}

    def tree_origin(self, engine, platform):
        return TreeOrigin("pypi", requirement=engine.sdist, artifact="sdist", version_file="vllm/_version.py")

    def fragment(self, engine, platform):
        return Fragment("modes/vllm-precompiled.j2")


MODE = VllmPrecompiled()
