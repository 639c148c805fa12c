"""Option grammar shared by the commands (image and registry references, paths, build options), the way a
command declares its options once (`option`), and the smoke verdict line."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Optional

from servebuild.errors import InputError
from servebuild.plan.make import BuildOptions

from servebuild.recipe.grammar import HOST, IMAGE_ID, TAG

DEFAULT_RECIPE = "sglang-native-fp8"  # what most commands act on without --recipe
MAIN_RECIPE = "torch-cu130-bookworm"  # the main job: needs no registry
HOST_RECIPE = "torch-cu130"  # smoke-expect: a host run checks a torch install
EXPECT_FILE = "smoke-expect.json"
DEFAULT_SUITE = "bookworm"  # bootstrap-base
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def path(value: Optional[str]) -> Optional[Path]:
    return Path(value) if value else None


def image_ref(value: Optional[str], option: str = "--image") -> str:
    """An image reference or id as docker takes it; it reaches docker as an argument, never an option."""
    ok = value is not None and (
        bool(IMAGE_ID.match(value))
        or (
            len(value) <= 255
            and not value.startswith("-")
            and bool(TAG.match(re.sub(r"@sha256:[0-9a-f]{64}\Z", "", value)))
        )
    )
    if not ok:
        raise InputError(f"{value!r} is not an image reference NAME[:TAG][@sha256:DIGEST] or an image id", field=option)
    return value


def registry_ref(registry: Optional[str], name: str, tag: str) -> str:
    """--registry/--repository/--tag as one reference HOST[:PORT]/REPOSITORY:TAG."""
    if not registry:
        raise InputError("give the registry as HOST[:PORT]", field="--registry")
    ref = f"{registry}/{name}:{tag}"
    if not re.fullmatch(HOST, registry) or not TAG.match(ref) or "@" in name or name.count(":"):
        raise InputError(
            f"{ref!r} is not a registry reference HOST[:PORT]/REPOSITORY:TAG", field="--registry/--repository/--tag"
        )
    return ref


def split_registry_ref(ref: Optional[str]) -> tuple[str, str, str]:
    """REF (verify's argument) -> (registry, repository, tag)."""
    m = re.fullmatch(rf"({HOST})/([a-z0-9][a-z0-9._/-]*):([A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})", ref or "")
    if not m or not TAG.match(ref):
        raise InputError(f"{ref!r} is not a registry reference HOST[:PORT]/REPOSITORY:TAG", field="REF")
    return m.group(1), m.group(2), m.group(3)


def whole_seconds(value: Optional[str], default: int, option: str = "--timeout", positive: bool = False) -> int:
    """A str option (invoke's int() would traceback on 'abc') holding a whole number of seconds
    (`positive`: at least 1, for a limit that 0 would make expire before anything ran)."""
    if value is None:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", value):
        raise InputError(f"{value!r} is not a whole number of seconds", field=option)
    if positive and int(value) < 1:
        raise InputError(f"{value!r} is not a whole number of seconds above 0", field=option)
    return int(value)


def default_ca_bundle(explicit: Optional[str] = None, host_default: bool = False) -> Optional[str]:
    """--ca-bundle, else $SERVEBUILD_CA_BUNDLE, else (for the main job) this host's bundle if it has one."""
    found = explicit or os.environ.get("SERVEBUILD_CA_BUNDLE")
    if found is None and host_default and HOST_CA.exists():
        found = str(HOST_CA)
    return found


def option(default: Any = None, help: str = "", repeatable: bool = False, plan: bool = False) -> Any:
    """One field of a command's options dataclass, and all there is to say of the option: its default
    (its type for invoke: a bool is a flag, anything else a value), its help line, whether it may be given
    more than once (a list), and whether the build plan takes it (`build_options(args)`). The invoke task's
    parameters and help are made from these fields (cli.front.options_task): nothing repeats them. invoke
    gives short flags in field order, so a new option goes last (no existing option's short flag moves)."""
    return dataclasses.field(default=default, metadata={"help": help, "repeatable": repeatable, "plan": plan})


PLAN_FIELDS = {f.name for f in dataclasses.fields(BuildOptions)}


def build_options(args: Any = None, **given: Any) -> BuildOptions:
    """The build plan's options: the fields of a command's options `args` marked `plan`, then `given`
    (which wins); the paths made Paths, the CA bundle defaulted (default_ca_bundle)."""
    values = {}
    if args is not None:
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.metadata.get("plan")}
    values.update(given)
    unknown = sorted(set(values) - PLAN_FIELDS)
    if unknown:  # a programming error: the plan has no such option
        raise TypeError(f"BuildOptions has no field {', '.join(unknown)}")
    values["ca_bundle"] = path(default_ca_bundle(values.get("ca_bundle")))
    for name in ("netrc", "mirror_map"):
        values[name] = path(values.get(name))
    values["cache_from"] = tuple(values.get("cache_from") or ())
    return BuildOptions(**values)


def verdict(code: int, out_dir: Path) -> int:
    """Print the smoke verdict; its exit status is the command's (1 on FAIL)."""
    print(f"smoke verdict: {'PASS' if code == 0 else 'FAIL'} (JUnit XML: {out_dir / 'smoke-junit.xml'})")
    return 0 if code == 0 else 1
