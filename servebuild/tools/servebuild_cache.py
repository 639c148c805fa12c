"""The serving image's cache root: seed it, count what is in it, pack what a run added (runs in the image).

usage: python servebuild_cache.py seed   [--cache /cache] [--seed /opt/servebuild/seed]
       python servebuild_cache.py census [--cache /cache] [--out FILE] [--listing FILE] [--since FILE]
       python servebuild_cache.py pack   [--cache /cache] [--seed ...] --out FILE.tar [--max-bytes N]

seed    copies every file of SEED/cache that CACHE lacks (never overwrites: what a volume holds wins),
        keeping mtimes (ninja-driven JITs compare them), each file written under a temporary name and
        renamed; then writes CACHE/.servebuild/origin.json naming the image's manifest (sha256) the
        cache was first seeded from, unless one is there. Every launcher runs it before the server.
census  one JSON object: {kind: number of files} for each directory under CACHE (kind = the JIT
        cache: triton, tvm-ffi, flashinfer, ...), the origin, and the sha256 of the file list;
        --listing FILE also writes every file's size and mtime; --since FILE (an earlier listing)
        adds "changed": {kind: files new or rewritten since, empty lock files aside} - what a run
        compiled, per kind, even where a JIT rebuilt a module in place (`invoke warm`, the smoke suite, the H200 benchmark).
pack    a tar (sorted, mtimes kept, owner 0) of the non-empty files under CACHE that SEED/cache lacks:
        what a run compiled, for `invoke warm`'s cache layer. Refuses (exit 3) above --max-bytes.

Standard library only: the image's Python, without servebuild installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tarfile

from servebuild_files import NotRegular, load_json

MANIFEST = os.environ.get("SERVEBUILD_MANIFEST", "/opt/servebuild/manifest.json")
ORIGIN = os.path.join(".servebuild", "origin.json")


class BadInput(Exception):
    """What the caller gave cannot be used (one line, exit 2)."""


def files_under(root: str) -> list[str]:
    found = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.relpath(os.path.join(d, name), root)
            if not path.startswith(".servebuild" + os.sep):
                found.append(path)
    return found


def manifest_sha256() -> str | None:
    try:
        with open(MANIFEST, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def read_origin(cache: str) -> dict | None:
    try:
        with open(os.path.join(cache, ORIGIN), encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def seed(cache: str, seed_dir: str) -> int:
    source = os.path.join(seed_dir, "cache")
    copied = 0
    for rel in files_under(source) if os.path.isdir(source) else []:
        target = os.path.join(cache, rel)
        if os.path.lexists(target):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temp = f"{target}.servebuild-seed.{os.getpid()}"
        shutil.copy2(os.path.join(source, rel), temp)
        os.replace(temp, target)
        copied += 1
    if read_origin(cache) is None:
        os.makedirs(os.path.join(cache, ".servebuild"), exist_ok=True)
        temp = os.path.join(cache, ORIGIN + f".{os.getpid()}")
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump({"manifest_sha256": manifest_sha256(), "image_id": os.environ.get("SERVEBUILD_IMAGE_ID")},
                      handle, sort_keys=True)
        os.replace(temp, os.path.join(cache, ORIGIN))
    print(f"servebuild-cache: seeded {copied} files into {cache}", file=sys.stderr)
    return 0


def kind_of(rel: str) -> str:
    return rel.split(os.sep, 1)[0] if os.sep in rel else "."


def stamps(cache: str) -> dict[str, list[int]]:
    out = {}
    for rel in files_under(cache) if os.path.isdir(cache) else []:
        st = os.lstat(os.path.join(cache, rel))
        out[rel] = [st.st_size, st.st_mtime_ns]
    return out


def census(cache: str, listing: str | None = None, since: str | None = None) -> dict:
    now = stamps(cache)
    kinds: dict[str, int] = {}
    for rel in now:
        kinds[kind_of(rel)] = kinds.get(kind_of(rel), 0) + 1
    digest = hashlib.sha256("\n".join(now).encode()).hexdigest()
    out = {"cache": cache, "files": len(now), "kinds": kinds, "listing_sha256": digest,
           "origin": read_origin(cache), "manifest_sha256": manifest_sha256()}
    if since:
        try:  # a file the run left at the listing's path: never block on it, never trace back on it
            before = load_json(since)
        except NotRegular:
            raise BadInput(f"--since {since}: not a regular file") from None
        except ValueError as exc:
            raise BadInput(f"--since {since}: {exc}") from None
        if not isinstance(before, dict):
            raise BadInput(f"--since {since}: not a JSON object (a listing written by census --listing)")
        changed: dict[str, int] = {}
        for rel, stamp in now.items():
            prior = before.get(rel) or [0]
            prior_size = prior[0] if isinstance(prior, list) and prior else None
            # an empty file touched again is a lock (FlashInfer's FileLock, tvm-ffi's build lock), not a compile
            if before.get(rel) != stamp and not (stamp[0] == 0 and prior_size == 0):
                changed[kind_of(rel)] = changed.get(kind_of(rel), 0) + 1
        out["changed"] = changed
    if listing:
        with open(listing, "w", encoding="utf-8") as handle:
            json.dump(now, handle)
    return out


def pack(cache: str, seed_dir: str, out: str, max_bytes: int) -> int:
    seeded = set(files_under(os.path.join(seed_dir, "cache")))
    new = [rel for rel in files_under(cache) if rel not in seeded and os.path.getsize(os.path.join(cache, rel)) > 0]
    total = sum(os.path.getsize(os.path.join(cache, rel)) for rel in new)
    if total > max_bytes:
        print(f"servebuild-cache: the run added {total} bytes under {cache}, above the limit {max_bytes}",
              file=sys.stderr)
        return 3

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in new:
            tar.add(os.path.join(cache, rel), arcname=rel, recursive=False, filter=owned)
    print(json.dumps({"files": len(new), "bytes": total}))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("seed", "census", "pack"))
    parser.add_argument("--cache", default="/cache")
    parser.add_argument("--seed", default="/opt/servebuild/seed")
    parser.add_argument("--out")
    parser.add_argument("--max-bytes", type=int, default=1 << 36)
    parser.add_argument("--listing", help="census: also write every file's size and mtime here")
    parser.add_argument("--since", help="census: count files new or rewritten since this listing")
    args = parser.parse_args(argv)
    try:
        if args.command == "seed":
            return seed(args.cache, args.seed)
        if args.command == "pack":
            if not args.out:
                parser.error("pack needs --out")
            return pack(args.cache, args.seed, args.out, args.max_bytes)
        text = json.dumps(census(args.cache, args.listing, args.since), sort_keys=True)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
        else:
            print(text)
        return 0
    except BadInput as exc:
        print(f"servebuild-cache: {args.command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only or full cache volume: say so in one line, never a traceback
        print(f"servebuild-cache: {args.command} {args.cache}: {exc.strerror or exc}"
              + (f": {exc.filename}" if exc.filename else ""), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
