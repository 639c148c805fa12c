"""Figures for "Registry limits" (docs/reference/registry-limits.md): `invoke verify` against each hostile registry mode
(tests/hostile_registry.py) under the DEFAULT deadlines (60 s a request, 600 s an operation), with the
wall time and the CLI's peak RSS. About 3 minutes (the slow cases wait out their deadline).

    .venv/bin/python scripts/bench_hostile_registry.py [MODE ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from hostile_registry import HostileRegistry, run_cli, write_creds  # noqa: E402

MODES = [
    "slow-loris-body",
    "slow-loris-headers",
    "never-answers",
    "huge-manifest",
    "huge-manifest-undeclared",
    "huge-blob",
    "huge-blob-undeclared",
    "wrong-digest",
    "wrong-blob",
    "tag-digest-lie",
    "redirect-loop",
    "redirect-many",
    "redirect-away",
    "deep-json",
    "escaping-referrer",
    "token-flood",
    "token-deep",
    "ok",
]


def run(mode: str):
    registry = HostileRegistry(mode)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            creds = write_creds(Path(tmp) / "creds.json")
            for name in [k for k in os.environ if k.startswith("SERVEBUILD_REGISTRY_")]:
                del os.environ[name]  # the defaults are what is measured
            return run_cli(
                ROOT,
                ["verify", "--ref", registry.ref, "--credentials", str(creds)],
                Path(tmp),
                {"PYTHONPATH": str(ROOT), "HOME": tmp},
                timeout=900,
            )
    finally:
        registry.stop()


def main() -> None:
    print("| mode | seconds | peak RSS MiB | exit | line |\n|---|---|---|---|---|")
    for mode in sys.argv[1:] or MODES:
        proc = run(mode)
        line = (proc.lines or [""])[-1]
        print(f"| {mode} | {proc.seconds:.1f} | {proc.peak_mib:.0f} | {proc.returncode} | {line[:150]} |", flush=True)


if __name__ == "__main__":
    main()
