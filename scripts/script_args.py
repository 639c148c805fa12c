"""The scripts' one-line argument rule (tiny_model.py, tiny_dsv4.py, first_start_gpu.py): every option is
checked before any file or folder is made, and a bad one is one line on stderr, exit 2, no usage block and
no traceback. Standard library only."""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
from pathlib import Path


class BadArgs(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2, no usage block
        raise BadArgs(message)


def whole(name: str, low: int, high: int):
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} {value} is outside {low}..{high}")
        return value

    return parse


def positive_float(name: str, high: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a number") from None
        if not math.isfinite(value) or not 0 < value <= high:
            raise argparse.ArgumentTypeError(f"{name} {text} must be a finite number in (0, {high}]")
        return value

    return parse


def new_folder(option: str, text: str) -> Path:
    """A folder the script makes and fills: absent, or an empty folder (not a link, a file, or a folder
    holding something else)."""
    path = Path(text)
    if path.is_symlink():
        raise BadArgs(f"{option} {text}: is a link; give a folder")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BadArgs(f"{option} {text}: exists and is not an empty folder")
    return path


def folder_or_absent(option: str, text: str) -> Path:
    """A folder the script makes if absent or keeps using (a link or anything but a folder refused)."""
    path = Path(text)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise BadArgs(f"{option} {text}: exists and is not a folder")
    return path


def read_json_object(path: Path, what: str, limit: int = 16 << 20) -> dict:
    """A JSON object from the regular file `path` (a FIFO not waited on, at most `limit` bytes); BadArgs
    naming the file otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as exc:
        raise BadArgs(f"{path}: the {what} cannot be read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadArgs(f"{path}: the {what} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise BadArgs(f"{path}: the {what} is larger than {limit} bytes")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise BadArgs(f"{path}: the {what} is nested too deep") from None
    except ValueError as exc:
        raise BadArgs(f"{path}: the {what} is not JSON: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(data, dict):
        raise BadArgs(f"{path}: the {what} is not a JSON object")
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")
