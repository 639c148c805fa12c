"""Extension point: engine kinds — what servebuild knows about one inference server, in one folder each.

A kind (on the protocol in base.py) holds its launch-profile rules (e.g. DSpark settings and how
that engine spells them), its defaults (port, listen flags, environment, whether it compiles
kernels while serving) and its extra smoke checks. Generic code asks `kind_for(name)` and never
names an engine itself; an engine without a folder gets the generic kind (no extra rules).
Launch profiles (profiles.py) are the one argv parser and the launcher script. Reads: the ground only.
"""

from __future__ import annotations

from typing import Optional

from servebuild.engines import sglang, vllm
from servebuild.engines.base import CACHE_ROOT, JIT_CACHE_ENV, EngineKind

__all__ = ["CACHE_ROOT", "JIT_CACHE_ENV", "EngineKind", "KINDS", "kind_for"]

# The registration table: one line per kind.
KINDS = {k.name: k for k in (sglang.KIND, vllm.KIND)}
GENERIC = EngineKind()


def kind_for(engine_name: Optional[str]) -> EngineKind:
    return KINDS.get(engine_name or "", GENERIC)
