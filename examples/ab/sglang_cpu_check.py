"""A CPU-only A/B check for SGLang variant images: it runs the patched code itself and prints one
JSON line of metrics, so `invoke bisect --run` tells the variants apart without a GPU or a model.

- chunks_1m / first_chunk / min_chunk: the prefill chunk plan of a 1,048,535-token request with
  --chunked-prefill-size 12288, walked through the image's scheduler policy: the adaptive-prefill
  patch's `next_chunk_size` where the image has it (SGLANG_DSV4_ADAPTIVE_PREFILL as the environment
  sets it, 1 when unset: source a launcher's environment first to measure that profile's policy),
  else the stock fixed chunk.
- shared_expert_slot / shared_expert_slot_fused: where the DSpark draft loader maps a shared-expert
  weight name (`_remap_dspark_weight_name` of the image's deepseek_v4_dspark.py) with shared experts
  separate (the default launcher) and fused (--enforce-shared-experts-fusion): 256 is the fused slot,
  -1 a name that stays a shared expert. The original remap fix gives 256 both ways; the fusion-policy
  backport (#33312's behaviour) gives -1 then 256; the release -1 both ways.
- verify_pad_c4: how many verify tokens per step the DSV4 compress plan persists in a C4 state ring
  with speculation (c_plan.cuh): 4 in the release, 8 with the verify-pad backport (#34189).

Run inside an image: python /checks/sglang_cpu_check.py (bind-mount this directory at /checks).
Only sglang's stdlib-level modules are imported (no torch, no CUDA).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import sys
import types
from pathlib import Path
from typing import Optional

TOKENS, CONFIGURED = 1_048_535, 12_288


def sglang_dir() -> Path:
    spec = importlib.util.find_spec("sglang")  # a top-level spec imports nothing
    return Path(list(spec.submodule_search_locations)[0])


def chunk_plan(root: Path) -> dict:
    if not (root / "srt" / "managers" / "adaptive_prefill.py").exists():
        sizes = [min(CONFIGURED, TOKENS - done) for done in range(0, TOKENS, CONFIGURED)]
        return {"adaptive_prefill": 0, "chunks_1m": len(sizes), "first_chunk": sizes[0], "min_chunk": min(sizes[:-1])}
    # bind the parent packages to their directories without running their __init__ (torch)
    for pkg in ("sglang", "sglang.srt", "sglang.srt.managers"):
        module = types.ModuleType(pkg)
        module.__path__ = [str(root.parent / pkg.replace(".", "/"))]
        sys.modules[pkg] = module
    os.environ.setdefault("SGLANG_DSV4_ADAPTIVE_PREFILL", "1")  # a launch profile's environment may set 0
    policy = importlib.import_module("sglang.srt.managers.adaptive_prefill")
    config = policy.AdaptivePrefillConfig.from_env()
    done, sizes = 0, []
    while done < TOKENS:
        take = min(policy.next_chunk_size(config, CONFIGURED, TOKENS, done), TOKENS - done)
        sizes.append(take)
        done += take
    return {"adaptive_prefill": int(bool(config.enabled)), "chunks_1m": len(sizes), "first_chunk": sizes[0],
            "min_chunk": min(sizes[:-1])}


def shared_expert_slot(root: Path, fused: int) -> int:
    path = root / "srt" / "models" / "deepseek_v4_dspark.py"
    tree = ast.parse(path.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_remap_dspark_weight_name")
    namespace = {"Optional": Optional}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    model = types.SimpleNamespace(
        confidence_head=None,
        num_fused_shared_experts=fused,  # what the fusion policy resolved (the release's loader never reads it)
        config=types.SimpleNamespace(n_routed_experts=256),
    )
    mapped = namespace["_remap_dspark_weight_name"](model, "mtp.0.ffn.shared_experts.w1.weight")
    return 256 if mapped and ".experts.256." in mapped else -1


def verify_pad_c4(root: Path) -> int:
    source = (root / "jit_kernel" / "csrc" / "deepseek_v4" / "c_plan.cuh").read_text()
    ring, window = 16, 8  # C4 with speculation: get_compress_state_ring_size(4, True), the overlap window
    if "kMaxMTPDraftTokens = 4" in source:
        return min(ring - 4, 4)
    return ring - window if "ring_size - window_size" in source else -1


def main() -> int:
    root = sglang_dir()
    metrics = {
        **chunk_plan(root),
        "shared_expert_slot": shared_expert_slot(root, 0),
        "shared_expert_slot_fused": shared_expert_slot(root, 1),
        "verify_pad_c4": verify_pad_c4(root),
    }
    print(json.dumps(metrics, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
