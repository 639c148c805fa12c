"""Figures for the README's "Registry limits": `invoke verify` against each hostile registry mode
(tests/hostile_registry.py) under the DEFAULT deadlines (60 s a request, 600 s an operation), with the
wall time and the CLI's peak RSS. About 3 minutes (the slow cases wait out their deadline).

    .venv/bin/python scripts/bench_hostile_registry.py [MODE ...]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from hostile_registry import HostileRegistry  # noqa: E402

MODES = ["slow-loris-body", "slow-loris-headers", "never-answers", "huge-manifest", "huge-manifest-undeclared",
         "huge-blob", "huge-blob-undeclared", "wrong-digest", "tag-digest-lie", "redirect-loop", "redirect-many",
         "redirect-away", "deep-json", "escaping-referrer", "token-flood", "token-deep", "ok"]
MEASURE = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
           "print(f'peak-rss-kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr); "
           "sys.exit(p.returncode)")


def run(mode: str) -> tuple[float, float, int, str]:
    registry = HostileRegistry(mode)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            creds = Path(tmp) / "creds.json"
            creds.write_text('{"username": "u", "password": "p"}')
            creds.chmod(0o600)
            env = {k: v for k, v in os.environ.items() if not k.startswith("SERVEBUILD_REGISTRY_")}
            env.update(PYTHONPATH=str(ROOT), HOME=tmp)
            start = time.monotonic()
            proc = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "invoke", "-r", str(ROOT),
                                   "verify", "--ref", registry.ref, "--credentials", str(creds)],
                                  env=env, cwd=tmp, capture_output=True, text=True, timeout=900)
            seconds = time.monotonic() - start
    finally:
        registry.stop()
    lines = proc.stderr.splitlines()
    return seconds, int(lines[-1].split("=")[1]) / 1024, proc.returncode, (lines[:-1] or [""])[-1]


def main() -> None:
    print("| mode | seconds | peak RSS MiB | exit | line |\n|---|---|---|---|---|")
    for mode in sys.argv[1:] or MODES:
        seconds, peak, code, line = run(mode)
        print(f"| {mode} | {seconds:.1f} | {peak:.0f} | {code} | {line[:150]} |", flush=True)


if __name__ == "__main__":
    main()
