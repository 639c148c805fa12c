"""Parse every launch profile of an image with its engine's own argument parser (runs in the image).

usage: python profile_check.py --recipe R --engine sglang --dist sglang --site DIR --hook FILE
                               --launchers DIR --out FILE NAME...

Each NAME is run as the launcher `DIR/NAME` (the exact script the image installs, its environment
and argv included) with the sitecustomize in --site, which stops it once the parser has answered.
One line per profile; a rejected profile is one line starting with `servebuild: ` that names the
recipe, the profile, the engine and version, and the engine's own message. Exit 1 if any is
rejected. Standard library only: it runs on the image's Python, without servebuild installed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata

TIMEOUT = 600  # seconds for one launcher to reach its parser (importing an engine takes ~10-60 s)


def check(name, args, version):
    env = dict(os.environ)
    env["PYTHONPATH"] = args.site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", SERVEBUILD_ARGCHECK_HOOK=args.hook)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "outcome.json")
        env["SERVEBUILD_ARGCHECK_OUT"] = out
        try:
            proc = subprocess.run([os.path.join(args.launchers, name)], env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=TIMEOUT)
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [f"exit {proc.returncode}"]
        except subprocess.TimeoutExpired:
            return None, f"its launcher did not reach {args.engine}'s argument parser in {TIMEOUT} s"
        if not os.path.exists(out):
            return None, (f"its launcher exited (rc {proc.returncode}) before {args.engine}'s argument parser "
                          f"answered: {tail[0][:300]}")
        with open(out, encoding="utf-8") as handle:
            outcome = json.load(handle)
    if outcome.get("hook_error"):
        return None, f"servebuild cannot hook {args.engine} {version}'s argument parser: {outcome['hook_error']}"
    if not outcome.get("ok"):
        return None, f"{args.engine} {version} rejects the launcher's arguments: {outcome.get('message')}"
    return outcome, None


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--recipe", "--engine", "--dist", "--site", "--hook", "--launchers", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("profiles", nargs="+")
    args = parser.parse_args()
    version = metadata.version(args.dist)
    record = {"engine": args.engine, "version": version, "recipe": args.recipe, "profiles": {}}
    failures = 0
    for name in args.profiles:
        outcome, problem = check(name, args, version)
        if problem:
            failures += 1
            print(f"servebuild: recipe {args.recipe}, launch profile {name}: {problem}", flush=True)
            continue
        record["profiles"][name] = {"parsed_by": outcome["parsed_by"]}
        print(f"profile {name}: accepted by {outcome['parsed_by']} ({args.engine} {version})", flush=True)
    if failures:
        return 1
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
