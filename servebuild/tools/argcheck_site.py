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


def _finish(record):
    with open(_OUT, "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if record.get("ok") else 3)


def _rejected(parser, message):
    _finish({"ok": False, "message": " ".join(str(message).split()), "prog": parser.prog})


def _parsed(namespace, parsed_by):
    _finish({"ok": True, "parsed_by": parsed_by, "options": len(vars(namespace))})


if _OUT and _HOOK:
    try:
        argparse.ArgumentParser.error = _rejected
        _spec = importlib.util.spec_from_file_location("servebuild_argcheck_hook", _HOOK)
        _module = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_module)
        _module.install(_parsed)
    except BaseException as exc:  # site.py would swallow it and let the server start: end here
        _finish({"ok": False, "hook_error": f"{type(exc).__name__}: {exc}"})
