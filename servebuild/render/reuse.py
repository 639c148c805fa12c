"""Which build-time stages a variant shares with its release engine (issue 30).

The aot stage (kernels compiled with no GPU) and the profile-check stage (every launch profile parsed by
the engine's own parser) read only part of the engine: the kernel builders and their sources, the
argument parser and what it imports. A variant whose patches touch none of that part gets the stage
its release builds, on the release engine (`engine-release`: the runtime stage before the overlay,
with the release's own dist-info), so BuildKit runs it once for every such variant; a variant that
touches it gets the stage on its own engine (`runtime-base`), and the build log names the first file
that decided it; when what it touches is kernel sources alone (no Python), the aot stage runs on `aot-base`,
the release engine with only those sources, so variants whose kernel sources are the same bytes share it.
The profile check of such a variant runs on `check-base`: the release engine with only
the patched files its parser reads and the files the stack adds, so variants whose parser reads the
same bytes share one check (one whose stack deletes a parser file gets its own engine). The rule reads
the patch stack's real file list (the sources station's `git apply --numstat`), never a variant's name,
and the stage a variant gets is fixed by its inputs: the image is the same from a cold cache or a warm
one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from servebuild.patchfiles import is_native

RELEASE = "engine-release"  # the release engine, runnable (images/stages/runtime.j2)
VARIANT = "runtime-base"  # the variant's own engine
# the release engine with only the files of the variant that its argument parser reads (and the files the
# stack adds): variants whose parser reads the same bytes get one profile check (check-overlay/ in the context)
PARSER = "check-base"
# the release engine with only the kernel sources the variant changes (kernel-overlay/ in the context): the
# aot stage of variants whose kernel sources are the same bytes is one BuildKit step, whatever else they patch
KERNELS = "aot-base"


@dataclass(frozen=True)
class Overlay:
    """What a patch stack does to the engine's tree (tree paths): the files it changes, those it adds,
    and those it deletes (the sources station's record, sources/stack.py)."""

    changed: tuple[str, ...]
    created: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()

    @classmethod
    def of(cls, files) -> Optional["Overlay"]:
        """An Overlay as it is, a plain list as changed files (none added or deleted), None as None."""
        if files is None or isinstance(files, Overlay):
            return files
        return cls(tuple(files))


@dataclass(frozen=True)
class StageBase:
    """The stage a build-time step runs on, and why (None: the release's, shared by such variants)."""

    base: str
    because: Optional[str] = None
    # aot only: the kernel sources (site paths, none of them Python) the patches change. The stage then
    # compiles only the kernels that read one of them, by their release build's own record of what it
    # read, and copies the rest from the release's seed (tools/aot_build.py --reuse-from)
    changed: tuple[str, ...] = ()

    @property
    def shared(self) -> bool:
        return self.base == RELEASE

    def describe(self, stage: str) -> str:
        if self.base == KERNELS:
            return (
                f"{stage}: built on the release engine with the files of this variant its kernels read "
                f"({self.because}); only the kernels that read {', '.join(self.changed)} are compiled, the rest "
                f"copied from the release's"
            )
        if self.base == PARSER:
            return (
                f"{stage}: built on the release engine with the files of this variant its parser reads or the "
                f"stack adds ({self.because}): {', '.join(self.changed)}"
            )
        if self.shared:
            return f"{stage}: shared with the release engine (no patch touches what it reads)"
        if self.changed:
            return (
                f"{stage}: built on this variant's engine ({self.because}); only the kernels that read "
                f"{', '.join(self.changed)} are compiled, the rest copied from the release's"
            )
        return f"{stage}: built on this variant's engine ({self.because})"


def _covered(site: str, prefixes: Sequence[str]) -> bool:
    return any(site == p or (p.endswith("/") and site.startswith(p)) or p == "" for p in prefixes)


def stage_bases(engine, overlay_files, platform: str) -> dict[str, StageBase]:
    """`aot` and `profile-check` -> the stage each runs on. `overlay_files`: the patch stack's Overlay (or
    the list of files it changes, tree paths); None when they are not known (a dry run, `invoke render`):
    each stage then runs on the variant's engine, which is never wrong, only slower."""
    overlay = Overlay.of(overlay_files)
    overlay_files = overlay.changed if overlay is not None else None
    mode, kind = engine.mode, engine.kind
    if mode.release_fragment(engine, platform) is None:
        why = f"install {mode.name} installs the patched tree in one step: no release engine to share"
        return {"aot": StageBase(VARIANT, why), "profile-check": StageBase(VARIANT, why)}
    if overlay_files is None:
        why = "the patch stack's files are not known before its sources are prepared"
        return {"aot": StageBase(VARIANT, why), "profile-check": StageBase(VARIANT, why)}
    installed = {f: mode.site_path(engine, f) for f in overlay_files}
    installed = {f: s for f, s in installed.items() if s is not None}
    out = {}
    touched = sorted(f for f in installed if is_native(f) or _covered(installed[f], kind.kernel_inputs))
    if not touched:
        out["aot"] = StageBase(RELEASE)
    else:
        why = f"{touched[0]} is a kernel input of {kind.name}"
        # a kernel source (not Python, under the kind's kernel inputs): each kernel's own build record
        # says whether it read it; Python may change any builder, flag or source list: every kernel again
        sources = all(_covered(installed[f], kind.kernel_inputs) and not installed[f].endswith(".py") for f in touched)
        changed = tuple(installed[f] for f in touched) if sources else ()
        gone = [f for f in touched if f in overlay.deleted]
        if sources and not gone:  # the release engine and these sources: shared by variants with the same bytes
            out["aot"] = StageBase(KERNELS, why, changed)
        else:  # Python under the kernel inputs, or a deleted source the release engine would still have
            out["aot"] = StageBase(VARIANT, f"{why}; the stack deletes {gone[0]}" if gone else why, changed)
    read = [f for f in sorted(installed) if _covered(installed[f], kind.parser_inputs)]
    if not read:
        out["profile-check"] = StageBase(RELEASE)
    else:
        why = f"{read[0]} is read by {kind.name}'s argument parser"
        gone = [f for f in read if f in overlay.deleted]
        if gone:  # the release engine would still have it
            out["profile-check"] = StageBase(VARIANT, f"{why}; the stack deletes {gone[0]}")
        else:
            carried = sorted({installed[f] for f in read} | {installed[f] for f in overlay.created if f in installed})
            out["profile-check"] = StageBase(PARSER, why, tuple(carried))
    return out


def parser_files(engine, bases: dict[str, StageBase], overlay_files) -> dict[str, str]:
    """Site path -> tree path of each file the check-base stage carries (none when the check is elsewhere)."""
    return _carried(engine, bases.get("profile-check"), PARSER, overlay_files)


def kernel_files(engine, bases: dict[str, StageBase], overlay_files) -> dict[str, str]:
    """Site path -> tree path of each kernel source the aot-base stage carries (none when aot is elsewhere)."""
    return _carried(engine, bases.get("aot"), KERNELS, overlay_files)


def _carried(engine, stage: Optional[StageBase], base: str, overlay_files) -> dict[str, str]:
    if stage is None or stage.base != base:
        return {}
    site = {f: engine.mode.site_path(engine, f) for f in Overlay.of(overlay_files).changed}
    return {s: f for f, s in sorted(site.items()) if s in stage.changed}
