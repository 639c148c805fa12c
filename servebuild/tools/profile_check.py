"""Parse every launch profile of an image with its engine's own argument parser (runs in the image).

usage: python profile_check.py --recipe R --engine sglang --dist sglang --site DIR --hook FILE
                               --launchers DIR --out FILE NAME...

Each NAME is run as the launcher `DIR/NAME` (the exact script the image installs, its environment
and argv included) with the sitecustomize in --site, which stops it once the parser has answered.
One line per profile; a rejected profile is one line starting with `servebuild: ` that names the
recipe, the profile, the engine and version, and the engine's own message. Exit 1 if any is
rejected. Standard library only: it runs on the image's Python, without servebuild installed.

One engine import for every profile (issue 30): each launcher is first run in capture mode (its shell
steps run, then the interpreter it starts records its argv, environment and directory and ends before
importing anything); this process then imports the engine once through the kind's hook, with the
variables every profile sets alike, and forks one child per profile, which takes that profile's whole
environment, directory and argv and runs its module (`python -m M`) or script as __main__ until the
parser answers. A variable only some profiles set reaches what the engine reads when it parses, not
what a module read at import. A launcher that starts another interpreter, or Python in another form,
is run whole as before (one import for it).
"""

import argparse
import importlib.util
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata

SKIP_ENV = ("SERVEBUILD_ARGCHECK_CAPTURE", "SERVEBUILD_ARGCHECK_OUT")

TIMEOUT = 600  # seconds for one launcher to reach its parser (importing an engine takes ~10-60 s)


def launcher_env(args):
    env = dict(os.environ)
    env["PYTHONPATH"] = args.site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", SERVEBUILD_ARGCHECK_HOOK=args.hook)
    return env


def check(name, args, version):
    """The launcher run whole: its interpreter imports the engine itself."""
    env = launcher_env(args)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "outcome.json")
        env["SERVEBUILD_ARGCHECK_OUT"] = out
        try:
            proc = subprocess.run([os.path.join(args.launchers, name)], env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=TIMEOUT)
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [f"exit {proc.returncode}"]
        except subprocess.TimeoutExpired:
            return None, f"its launcher did not reach {args.engine}'s argument parser in {TIMEOUT} s"
        return judged(out, proc.returncode, tail[0], args, version)


def judged(out, returncode, tail, args, version):
    if not os.path.exists(out):
        return None, (f"its launcher exited (rc {returncode}) before {args.engine}'s argument parser "
                      f"answered: {tail[:300]}")
    with open(out, encoding="utf-8") as handle:
        outcome = json.load(handle)
    if outcome.get("hook_error"):
        return None, f"servebuild cannot hook {args.engine} {version}'s argument parser: {outcome['hook_error']}"
    if not outcome.get("ok"):
        return None, f"{args.engine} {version} rejects the launcher's arguments: {outcome.get('message')}"
    return outcome, None


def captured(name, args):
    """How the launcher starts Python: {argv, executable, cwd, env}, or None (it did not, or not so)."""
    env = launcher_env(args)
    with tempfile.TemporaryDirectory() as tmp:
        env["SERVEBUILD_ARGCHECK_CAPTURE"] = os.path.join(tmp, "capture.json")
        try:
            subprocess.run([os.path.join(args.launchers, name)], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=TIMEOUT)
            with open(env["SERVEBUILD_ARGCHECK_CAPTURE"], encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None
    argv = record.get("argv") or []
    same = (os.path.realpath(record.get("executable") or "") == os.path.realpath(sys.executable))
    if not same or len(argv) < 2:
        return None
    if argv[1] == "-m" and len(argv) >= 3:
        record["run"] = ("module", argv[2], argv[3:])
    elif not argv[1].startswith("-") and os.path.isfile(argv[1]):
        record["run"] = ("path", argv[1], argv[2:])
    else:
        return None
    return record


def replay(records, args, version):
    """Import the engine once (the variables every profile sets alike), then one forked child per profile."""
    shared = dict(set.intersection(*(set((k, v) for k, v in r["env"].items() if k not in SKIP_ENV)
                                     for r in records.values())))
    os.environ.clear()
    os.environ.update(shared)
    sys.path[:0] = [p for p in shared.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    spec = importlib.util.spec_from_file_location("servebuild_argcheck_site", os.path.join(args.site, "sitecustomize.py"))
    site = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site)
    try:
        site.install(args.hook)
    except BaseException as exc:  # noqa: BLE001 - every profile gets the hook's failure
        return {name: (None, f"servebuild cannot hook {args.engine} {version}'s argument parser: "
                             f"{type(exc).__name__}: {exc}") for name in records}
    results = {}
    for name, record in records.items():
        with tempfile.TemporaryDirectory() as tmp:
            out, log = os.path.join(tmp, "outcome.json"), os.path.join(tmp, "output.txt")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(record, out, log)
            status = waited(pid)
            if status is None:
                results[name] = (None, f"its launcher did not reach {args.engine}'s argument parser in {TIMEOUT} s")
                continue
            with open(log, encoding="utf-8", errors="replace") as handle:
                tail = (handle.read().strip().splitlines() or [f"exit {os.waitstatus_to_exitcode(status)}"])[-1]
            results[name] = judged(out, os.waitstatus_to_exitcode(status), tail, args, version)
    return results


def waited(pid):
    """The child's wait status, or None after TIMEOUT seconds (the child is killed)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.05)


def _child(record, out, log):
    """In the forked child: the profile's environment, directory, argv and stdio; its module or script as
    __main__ until the hook ends the process (falling off the end means the parser never answered)."""
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        env = {k: v for k, v in record["env"].items() if k not in SKIP_ENV}
        os.environ.clear()
        os.environ.update(env, SERVEBUILD_ARGCHECK_OUT=out)
        os.chdir(record["cwd"])
        kind, target, rest = record["run"]
        if kind == "module":
            sys.argv = [target, *rest]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *rest]
            runpy.run_path(target, run_name="__main__")
        print("the server's entry point returned without parsing its arguments", flush=True)
    except SystemExit as exc:
        print(f"exit {exc.code}", flush=True)
    except BaseException as exc:  # noqa: BLE001 - the child's last line is the finding
        print(f"{type(exc).__name__}: {' '.join(str(exc).split())}", flush=True)
    finally:
        sys.stdout.flush()
        os._exit(4)


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--recipe", "--engine", "--dist", "--site", "--hook", "--launchers", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("profiles", nargs="+")
    # a variant's files over the release engine (the check-base stage): the record names them
    parser.add_argument("--variant-file", action="append", default=[])
    args = parser.parse_args()
    version = metadata.version(args.dist)
    record = {"engine": args.engine, "version": version, "recipe": args.recipe, "profiles": {}}
    if args.variant_file:
        record["variant_files"] = sorted(args.variant_file)
    failures = 0
    records = {name: captured(name, args) for name in args.profiles}
    together = {name: r for name, r in records.items() if r is not None}
    results = replay(together, args, version) if together else {}
    print(f"profile check: {len(together)} of {len(args.profiles)} profiles replayed after one import of "
          f"{args.engine}{'' if len(together) == len(args.profiles) else ' (the others run whole)'}", flush=True)
    for name in args.profiles:
        outcome, problem = results[name] if name in results else check(name, args, version)
        if problem:
            failures += 1
            print(f"servebuild: recipe {args.recipe}, launch profile {name}: {problem}", flush=True)
            continue
        record["profiles"][name] = {"parsed_by": outcome["parsed_by"]}
        also = f" with the variant's {', '.join(sorted(args.variant_file))}" if args.variant_file else ""
        print(f"profile {name}: accepted by {outcome['parsed_by']} ({args.engine} {version}{also})", flush=True)
    if failures:
        return 1
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
