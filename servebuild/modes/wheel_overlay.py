"""wheel-overlay: the release wheel, with its package replaced by the same package with the patch
stack applied (the tree is the wheel's own files, so deletions and renames carry over), and the
distribution relabelled with a local version naming the stack."""

from __future__ import annotations

from typing import Optional

from servebuild.patchfiles import is_native, is_test_or_doc
from servebuild.modes.base import RELABEL_TOOL, Fragment, InstallMode, TreeOrigin


class WheelOverlay(InstallMode):
    name = "wheel-overlay"
    required_fields = ("precompiled", "overlay_from")
    overlay_only = True  # the runtime fragment writes the changed files over the release install
    help = "the release wheel with its Python package replaced by the patched one"

    def context_files(self, engine, platform):
        return {"precompiled.txt": engine.precompiled[platform], **RELABEL_TOOL}

    def tree_origin(self, engine, platform):
        parent = engine.overlay_from.rstrip("/").rpartition("/")[0]
        return TreeOrigin(
            "pypi",
            requirement=engine.precompiled[platform],
            artifact="wheel",
            package_prefix=f"{parent}/" if parent else "",
        )

    def patch_problem(self, path: str, release_files: Optional[set[str]], engine) -> Optional[str]:
        inside = path.startswith(engine.overlay_from.rstrip("/") + "/")
        if not inside:
            return None if is_test_or_doc(path) else f"is outside {engine.overlay_from}, the overlaid package"
        if is_native(path) and (release_files is None or path not in release_files):
            return "touches native code that the release wheel ships compiled"
        return None

    def release_fragment(self, engine, platform):
        # the release wheel's own dist-info back beside its package: the release as pip installed it
        return Fragment("COPY --from=engine /opt/engine-info/ /opt/engine/site/\n")

    def site_path(self, engine, path):
        package = engine.overlay_from.rstrip("/")
        if not path.startswith(package + "/"):
            return None  # outside the overlaid package: not installed (tests, docs)
        parent = package.rpartition("/")[0]
        return path[len(parent) + 1 :] if parent else path

    def fragment(self, engine, platform):
        return Fragment("modes/wheel-overlay.j2")

    def runtime_fragment(self, engine, platform):
        package = engine.overlay_from.rstrip("/").split("/")[-1]
        return Fragment("modes/wheel-overlay-runtime.j2", {"package": package})


MODE = WheelOverlay()
