"""The scripts' one-line argument rule (tiny_model.py, tiny_dsv4.py, first_start_gpu.py): every option is
checked before any file or folder is made, and a bad one is one line on stderr, exit 2, no usage block and
no traceback. Standard library only."""

from __future__ import annotations

import argparse
import math
import os
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


def _above_is_a_folder(option: str, text: str, path: Path) -> None:
    """The nearest part of `path` above it that exists is a folder (FILE/x: the folder could never be made)."""
    for parent in path.absolute().parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise BadArgs(f"{option} {text}: {parent} is not a folder")
            return


def new_folder(option: str, text: str) -> Path:
    """A folder the script makes and fills: absent, or an empty folder (not a link, a file, or a folder
    holding something else)."""
    path = Path(text)
    if path.is_symlink():
        raise BadArgs(f"{option} {text}: is a link; give a folder")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BadArgs(f"{option} {text}: exists and is not an empty folder")
    _above_is_a_folder(option, text, path)
    return path


def folder_or_absent(option: str, text: str) -> Path:
    """A folder the script makes if absent or keeps using (a link or anything but a folder refused)."""
    path = Path(text)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise BadArgs(f"{option} {text}: exists and is not a folder")
    _above_is_a_folder(option, text, path)
    return path
