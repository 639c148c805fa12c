"""The rules of the front door: every user error is one line on stderr and exit code 2.

`one_line_errors` wraps an invoke task; `options_task` makes the task of a command whose options are one
dataclass (cli.options.option fields); `parse_errors_exit_2` makes invoke's own parse errors
("No idea what '--bogus' is!") follow the same rule.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import inspect
import os
import re
import signal
import sys

from invoke import Exit, ParseError, task
from invoke.program import Program

from servebuild import procs
from servebuild.errors import HostError, ServebuildError

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ^C ended

# what the host's file systems say when servebuild cannot write where it must (full, read-only, a file
# in the way, no permission, quota): one line, as every other host fault
HOST_FAULTS = {
    errno.ENOSPC,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.ENOTDIR,
    errno.EEXIST,
    errno.EISDIR,
    errno.EDQUOT,
    errno.EIO,
    errno.ENAMETOOLONG,
}


def one_line_errors(fn):
    """A task whose ServebuildError becomes `error: LINE` and its exit code; an int it returns is its
    exit status; an explicit empty option value is refused; a closed stdout ends it quietly."""
    defaults = {k: p.default for k, p in inspect.signature(fn).parameters.items()}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for key, value in kwargs.items():  # an explicit '' is a mistake, not "not given"
            values = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, str) and not v.strip() for v in values) and defaults.get(key) != value:
                raise Exit(f"error: --{key.replace('_', '-')}: empty value", code=2)
        try:
            status = fn(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, not as "Exception ignored" at exit
        except ServebuildError as exc:
            raise Exit(f"error: {exc}", code=exc.exit_code) from None
        except KeyboardInterrupt:  # SIGINT (^C, or `kill -INT` to this process alone): nothing left running
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second ^C must not cut the stopping short
            procs.stop_descendants()
            raise Exit(
                "error: interrupted (SIGINT): stopped, with every process it had started", code=INTERRUPTED
            ) from None
        except BrokenPipeError:  # `invoke validate | head`: the reader left; say nothing more
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise Exit(code=141) from None
        except OSError as exc:  # the net under fsutil.writing: a host fault on a path no block names
            if exc.errno not in HOST_FAULTS:
                raise
            # it cannot know whether the path was being read or written: the path and the errno text
            fault = HostError(exc.strerror or str(exc), file=str(exc.filename) if exc.filename else None)
            raise Exit(f"error: {fault}", code=fault.exit_code) from None
        if isinstance(status, int) and status:
            raise Exit(code=status)

    return wrapper


def options_task(options, **task_options):
    """The invoke task of a command whose options are the dataclass `options`: the task takes one parameter
    per field, in the fields' order (invoke gives short flags in that order), with the field's default; its
    help and repeatable options are the fields' (cli.options.option). The decorated body is called as
    body(c, options(...)) under one_line_errors, with the body's name and docstring as the task's."""
    fields = dataclasses.fields(options)
    signature = inspect.Signature(
        [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default) for f in fields]
    )
    help_lines = {f.name: f.metadata["help"] for f in fields if f.metadata.get("help")}
    repeatable = [f.name for f in fields if f.metadata.get("repeatable")]

    def decorate(body):
        def run(*args, **kwargs):
            given = signature.bind(*args, **kwargs)
            given.apply_defaults()
            c = given.arguments.pop("c")
            return body(c, options(**given.arguments))

        functools.update_wrapper(run, body)
        del run.__wrapped__  # invoke reads the parameters from the signature below, not from the body's
        run.__signature__ = signature
        extra = {"iterable": repeatable} if repeatable else {}
        return task(help=help_lines, **extra, **task_options)(one_line_errors(run))

    return decorate


def interrupts_stop() -> None:
    """SIGINT stops a command even where it was inherited ignored (a command started in the background by a
    non-interactive shell, or by a harness started so): a signal sent to servebuild's own process is meant
    for it, and the children it starts (docker clients in sessions of their own among them) never see it."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def parse_errors_exit_2() -> None:
    """invoke's own parse errors are user errors too: one line, exit 2 (idempotent)."""
    if getattr(Program.parse_tasks, "_servebuild", False):
        return
    original = Program.parse_tasks

    def parse_tasks(self):
        try:
            return original(self)
        except ParseError as exc:  # "Flag <Argument: tag (t)> needed value..." names the option as typed
            text = re.sub(
                r"<Argument: ([A-Za-z0-9_-]+)[^>]*>",
                lambda m: "--" + m.group(1).replace("_", "-"),
                " ".join(str(exc).split()),
            )
            raise Exit(f"error: {text}", code=2) from None
        except ValueError as exc:  # a typed option's cast (int/float default) refused the value
            raise Exit(f"error: an option's value is not valid: {' '.join(str(exc).split())}", code=2) from None

    parse_tasks._servebuild = True
    Program.parse_tasks = parse_tasks
