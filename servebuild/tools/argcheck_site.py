"""sitecustomize for servebuild's launch-profile check: runs inside the image, stdlib only.

The check runs each launcher exactly as an operator would, with PYTHONPATH naming the folder this
file is copied into (as sitecustomize.py). At interpreter start it loads the engine kind's hook
(servebuild/engines/<kind>/argcheck.py), which stops the server right after the engine's own
argument parser has read the argv; an argparse rejection is caught where argparse reports it.
Either way the outcome goes to $SERVEBUILD_ARGCHECK_OUT and the process ends before any server
starts. Nothing here is in the final image (the check stage is discarded but for its record).
"""

import argparse
import importlib.util
import json
import os
import sys

_OUT = os.environ.get("SERVEBUILD_ARGCHECK_OUT")
_HOOK = os.environ.get("SERVEBUILD_ARGCHECK_HOOK")
# capture mode (profile_check.py, one engine import for every profile): record how the launcher started
# Python (argv, environment, directory) and end before anything is imported; the check replays it
_CAPTURE = os.environ.get("SERVEBUILD_ARGCHECK_CAPTURE")


def _finish(record):
    # read at the end, not at start: a replayed profile runs in a child forked from the checker, whose
    # environment names that child's outcome file
    with open(os.environ.get("SERVEBUILD_ARGCHECK_OUT") or _OUT, "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if record.get("ok") else 3)


def _rejected(parser, message):
    _finish({"ok": False, "message": " ".join(str(message).split()), "prog": parser.prog})


def _parsed(namespace, parsed_by):
    _finish({"ok": True, "parsed_by": parsed_by, "options": len(vars(namespace))})


def install(hook):
    """Catch argparse's rejections and load the engine kind's hook (which imports the engine)."""
    argparse.ArgumentParser.error = _rejected
    spec = importlib.util.spec_from_file_location("servebuild_argcheck_hook", hook)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install(_parsed)


if _CAPTURE and __name__ == "sitecustomize":
    with open(_CAPTURE, "w", encoding="utf-8") as _handle:
        json.dump({"argv": list(getattr(sys, "orig_argv", [])), "executable": sys.executable,
                   "cwd": os.getcwd(), "env": dict(os.environ)}, _handle)
    os._exit(0)
elif _OUT and _HOOK and __name__ == "sitecustomize":
    try:
        install(_HOOK)
    except BaseException as exc:  # site.py would swallow it and let the server start: end here
        _finish({"ok": False, "hook_error": f"{type(exc).__name__}: {exc}"})
