"""The install-mode protocol: what every mode provides (see modes/__init__.py for the table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from servebuild import TOOLS_DIR
from servebuild.patchfiles import is_native

ENGINE_SITE = "/opt/engine/site"  # where an overlay mode installs the engine (its release in the engine stage)

# relabels the installed distribution with ENGINE_VERSION (and, for overlays, replaces its package)
RELABEL_TOOL = {"tools/overlay_package.py": str(TOOLS_DIR / "overlay_package.py")}


@dataclass(frozen=True)
class TreeOrigin:
    """Where the engine's source tree comes from before the patch stack is applied.

    `git`: the pinned commit of the upstream repository. `pypi`: a hash-pinned release artifact
    of the tag (a wheel or an sdist, named by a hashed requirement file), unpacked under
    `prefix`; the git upstream is then needed only to compute PR diffs. A release may be cut from a
    commit after the tag: `version_file` names the file that says which (sources/versionfile.py).
    """

    kind: str  # "git" or "pypi"
    requirement: Optional[str] = None  # hashed requirement file (project-relative) for "pypi"
    artifact: str = "wheel"  # "wheel" or "sdist"
    package_prefix: str = ""  # where the artifact's files land in the tree (e.g. python/ for a wheel)
    # the generated version file (its path in the artifact) whose commit_id names the commit it was cut from
    version_file: Optional[str] = None


@dataclass
class Fragment:
    """What a mode contributes to the engine stage, rendered by its template."""

    template: str
    data: dict = field(default_factory=dict)


class InstallMode:
    """Base class: subclasses set `name` and override what differs."""

    name = ""
    compiles = False  # the engine stage runs a native compile (gets MAX_JOBS/NVCC_THREADS)
    accepts_native_patches = False
    # the context carries only what the stack changes (overlay.tar: those files under src/, as in the source
    # tarball; overlay-deleted.txt: the tree paths it deletes), not the whole patched tree (source.tar)
    overlay_only = False
    required_fields: tuple[str, ...] = ()  # engine fields that must be set, e.g. ("precompiled",)
    help = ""

    # -- validation (raise ValueError with the field path first)
    def validate(self, engine, platforms: list[str]) -> None:
        for name in self.required_fields:
            value = getattr(engine, name)
            if not value:
                raise ValueError(f"engine.{name}: install {self.name} needs it")
            if isinstance(value, dict):
                missing = [p for p in platforms if p not in value]
                if missing:
                    raise ValueError(f"engine.{name}: install {self.name} needs an entry for {', '.join(missing)}")
        if engine.source.sdist_commit is not None and not any(
            self.tree_origin(engine, p).version_file for p in platforms
        ):
            raise ValueError(
                f"engine.source.sdist_commit: install {self.name} does not take its tree from a release sdist"
            )

    # -- files
    def context_files(self, engine, platform: str) -> dict[str, str]:
        """Build-context name -> project-relative file: copied into the context, hashed into the
        manifest and the lock (one list for all three)."""
        return {}

    def tree_origin(self, engine, platform: str) -> TreeOrigin:
        return TreeOrigin("git")

    # -- patches
    def patch_problem(self, path: str, release_files: Optional[set[str]], engine) -> Optional[str]:
        """Why this mode cannot carry a change to `path` (None if it can)."""
        if not self.accepts_native_patches and is_native(path):
            return "touches native code"
        return None

    # -- what variants share (render/reuse.py)
    def release_fragment(self, engine, platform: str) -> Optional[Fragment]:
        """Steps that make the release engine runnable on top of the runtime stage before the mode's
        runtime fragment (the patched overlay) is applied: the stage the build-time work of a variant
        that cannot change it runs on. None: the mode has no such point (the engine stage installs the
        patched tree), every variant runs that work on its own engine."""
        return None

    def site_path(self, engine, path: str) -> Optional[str]:
        """Where a file of the patched tree lands in the installed site (`sglang/srt/x.py`), None if the
        install does not carry it. Only asked of a mode with a release fragment."""
        return None

    # -- rendering
    def fragment(self, engine, platform: str) -> Fragment:
        """The engine stage's install steps, into /opt/engine/site. The patched tree is the context
        file source.tar (its entries under src/); the build arg ENGINE_VERSION carries the version
        with the patch stack's local label. Declare that ARG only in a step that uses it: an ARG
        changes the cache key of every later step of its stage."""
        raise NotImplementedError

    def runtime_fragment(self, engine, platform: str) -> Optional[Fragment]:
        """Steps run in the runtime stage after the shared layers are copied (None: nothing)."""
        return None
