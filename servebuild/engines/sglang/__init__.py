"""SGLang: DSpark rules as SGLang spells them, serving defaults, smoke checks."""

from __future__ import annotations

import re
from pathlib import Path

from servebuild.engines.base import Defect, EngineKind, check_dspark_block

# SGLang 0.5.16-0.5.17's DSV4 compress plan persists at most this many verify tokens per step
VERIFY_PAD_LIMIT = 4


class SGLang(EngineKind):
    name = "sglang"
    port = 30000
    serve_time_jit = True  # DSV4 kernels via tvm-ffi, TileLang mHC prewarm, Triton, FlashInfer
    jit_probes = ("cext", "nvcc", "triton", "tvm-ffi", "tilelang", "flashinfer")
    entrypoints = ("sglang.launch_server",)
    argcheck = Path(__file__).with_name("argcheck.py")
    health_path = "/health"
    # SGLang 0.5.16 keeps FlashInfer autotune results and torch.compile output under SGLANG_CACHE_DIR, and
    # overwrites DG_JIT_CACHE_DIR with SGLANG_DG_CACHE_DIR at import (deep_gemm_wrapper/compile_utils.py)
    cache_env = {"SGLANG_CACHE_DIR": "sglang", "SGLANG_DG_CACHE_DIR": "deep_gemm"}
    aot_jits = {"tvm-ffi": "sglang.jit_kernel.", "flashinfer": "flashinfer.jit."}
    cache_paths = {"sglang": "sglang", "sglang-deep_gemm": "deep_gemm", "tokenspeed_triton": "triton"}
    # the kernels aot_build compiles come from sglang.jit_kernel's builders and sources (its .cuh/.cu, the
    # flags its utils pass nvcc); native files anywhere count too (render/reuse.py)
    kernel_inputs = ("sglang/jit_kernel/",)
    # every module of 0.5.16 imported when `python -m sglang.launch_server` has parsed its argv (193 files,
    # listed by the profile-check hook in the built image); the engine-image test fails if one is missing
    parser_inputs = (
        "sglang/__init__.py",
        "sglang/_version.py",
        "sglang/version.py",
        "sglang/global_config.py",
        "sglang/kernel_api_logging.py",
        "sglang/launch_server.py",
        "sglang/utils.py",
        "sglang/kernels/",
        "sglang/lang/",
        "sglang/jit_kernel/__init__.py",
        "sglang/jit_kernel/kv_canary/",
        "sglang/srt/server_args.py",
        "sglang/srt/environ.py",
        "sglang/srt/runtime_context.py",
        "sglang/srt/arg_groups/",
        "sglang/srt/compilation/",
        "sglang/srt/configs/",
        "sglang/srt/connector/",
        "sglang/srt/debug_utils/",
        "sglang/srt/distributed/",
        "sglang/srt/entrypoints/",
        "sglang/srt/function_call/",
        "sglang/srt/lora/",
        "sglang/srt/multimodal/",
        "sglang/srt/observability/",
        "sglang/srt/parser/",
        "sglang/srt/platforms/",
        "sglang/srt/plugins/",
        "sglang/srt/sampling/",
        "sglang/srt/utils/",
        "sglang/srt/model_executor/cuda_graph_config.py",
        "sglang/srt/model_executor/runner_backend_utils/",
        "sglang/srt/speculative/decoupled_spec_io.py",
    )

    defects = {
        "sglang-dsv4-verify-pad": Defect(
            versions=">=0.5.16,<0.5.18",
            why=(
                f"whose DSV4 compress plan persists only {VERIFY_PAD_LIMIT} verify tokens "
                f"(jit_kernel/csrc/deepseek_v4/c_plan.cuh: kMaxMTPDraftTokens = {VERIFY_PAD_LIMIT}), so rejected "
                "drafts roll back to compressor state never written and outputs are silently corrupted "
                "(fixed upstream by #34189, first in 0.5.18)"
            ),
            fix=(
                "put patches/sglang-dsv4-verify-pad.patch (`fixes: [sglang-dsv4-verify-pad]`) in the stack, "
                f"or verify at most {VERIFY_PAD_LIMIT} tokens (--speculative-dspark-block-size "
                f"{VERIFY_PAD_LIMIT - 1})"
            ),
        )
    }

    # the flags the DSpark rule reads, as SGLang's argparse accepts them (abbreviations included)
    DSPARK_FLAGS = ("--speculative-algorithm", "--speculative-dspark-block-size", "--speculative-num-draft-tokens")
    known_flags = DSPARK_FLAGS

    def check_profile(self, name, profile):
        """SGLang 0.5.16 spells the DSpark draft length two ways: --speculative-dspark-block-size
        (gamma, the proposals) or --speculative-num-draft-tokens (gamma + 1, it counts the verified
        token). With neither, gamma is taken from the draft checkpoint's block_size."""
        flags = self.flags(profile)
        for flag in self.DSPARK_FLAGS:
            if len(flags.get(flag, [])) > 1:
                raise ValueError(f"profile {name!r}: {flag} is given {len(flags[flag])} times (in some spelling)")
        super().check_profile(name, profile)
        algo = flags.get("--speculative-algorithm")
        if not algo or (algo[0] or "").upper() != "DSPARK":
            return
        for flag, offset in (("--speculative-dspark-block-size", 0), ("--speculative-num-draft-tokens", 1)):
            given = flags.get(flag)
            if given:
                if given[0] is None or not re.fullmatch(r"[0-9]+", given[0]):
                    raise ValueError(f"profile {name!r}: DSPARK needs an integer {flag}")
                what = flag if offset == 0 else f"{flag} minus one"
                check_dspark_block(name, profile.dspark_block_size, int(given[0]) - offset, what)

    def verify_tokens(self, profile) -> tuple[int, str] | None:
        """How many tokens a DSpark profile verifies per step and where that number comes from, as
        SGLang 0.5.16 resolves it (arg_groups/speculative_hook.py: --speculative-num-draft-tokens, else
        --speculative-dspark-block-size + 1, else the draft checkpoint's block size + 1); None when the
        profile does not run DSpark or the number is not known."""
        flags = self.flags(profile)
        algo = flags.get("--speculative-algorithm")
        if not algo or (algo[0] or "").upper() != "DSPARK":
            return None
        for flag, offset in (("--speculative-num-draft-tokens", 0), ("--speculative-dspark-block-size", 1)):
            given = (flags.get(flag) or [None])[0]
            if given is not None and re.fullmatch(r"[0-9]+", given):
                return int(given) + offset, f"{flag} {given}" + (" + 1" if offset else "")
        if profile.dspark_block_size is not None:
            return profile.dspark_block_size + 1, f"the checkpoint's block size {profile.dspark_block_size} + 1"
        return None

    def check_defects(self, name, profile, version, fixed):
        defect = self.defects["sglang-dsv4-verify-pad"]
        if "sglang-dsv4-verify-pad" in fixed or not defect.affects(version):
            return
        verify = self.verify_tokens(profile)
        if verify is not None and verify[0] > VERIFY_PAD_LIMIT:
            raise ValueError(
                f"profile {name!r}: DSpark verifies {verify[0]} tokens ({verify[1]}) on sglang {version}, "
                f"{defect.why}; {defect.fix}"
            )


KIND = SGLang()
