"""Extension point: install modes — how an engine's patched source becomes the installed engine in an image.

A mode is one object (one module per mode, on the protocol in base.py) registered in MODES. It
validates the engine fields it needs, names the files it adds to the build context, says where
the source tree comes from and which patches it can carry, and names its Dockerfile fragment for
the engine stage (a template beside its module, e.g. pip-source.j2; render/ renders it). Nothing
else in servebuild compares mode names: to add a mode, write a module and add it to the table below.
Reads: the ground only (no Jinja, no recipe).
"""

from __future__ import annotations

from servebuild.modes import pip_source, vllm_precompiled, wheel_overlay
from servebuild.modes.base import Fragment, InstallMode, TreeOrigin

__all__ = ["MODES", "Fragment", "InstallMode", "TreeOrigin", "get_mode", "register_mode"]

MODES: dict[str, InstallMode] = {}


def register_mode(mode: InstallMode) -> InstallMode:
    MODES[mode.name] = mode
    return mode


def get_mode(name: str) -> InstallMode:
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown install mode {name!r}; known: {', '.join(sorted(MODES))}") from None


# The registration table: one line per mode.
for _mode in (pip_source.MODE, vllm_precompiled.MODE, wheel_overlay.MODE):
    register_mode(_mode)
