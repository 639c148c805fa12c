"""The serving image's cache root: seed it, count what is in it, pack what a run added (runs in the image).

usage: python servebuild_cache.py seed   [--cache /cache] [--seed /opt/servebuild/seed]
       python servebuild_cache.py census [--cache /cache] [--out FILE] [--listing FILE] [--since FILE]
       python servebuild_cache.py pack   [--cache /cache] [--seed ...] --out FILE.tar [--max-bytes N]

seed    copies every file of SEED/cache that CACHE lacks (never overwrites: what a volume holds wins),
        keeping mtimes (ninja-driven JITs compare them), each file written under a temporary name and
        renamed (a failed write, ENOSPC, leaves no temporary file: one line, exit 1); then writes
        CACHE/.servebuild/origin.json naming the image's manifest (sha256) and image id the cache was
        first seeded from, unless one is there: an origin is never rewritten, whichever image it names
        (warm refuses a cache another image seeded). Every launcher runs it before the server.
        It stays in CACHE: a directory of CACHE (CACHE itself, .servebuild, any directory the seed
        holds) that is a link is refused, as is an origin.json that is not a regular file holding a
        JSON object (one line, exit 2; nothing written through it). A link in the seed is copied as a
        link when it is relative and stays inside SEED/cache; any other link (absolute, `..` out of
        it, or resolving out of it: /etc/shadow) and any FIFO or device is skipped, one line each.
census  one JSON object: {kind: number of files} for each directory under CACHE (kind = the JIT
        cache: triton, tvm-ffi, flashinfer, ...), the origin, and the sha256 of the file list;
        a directory it cannot list is one line naming it (exit 1), not a smaller count;
        --listing FILE also writes every file's size and mtime; --since FILE (an earlier listing)
        adds "changed": {kind: compile products new or rebuilt since} - what a run compiled, per
        kind, in files (`invoke warm`, bisect, the smoke suite, the H200 benchmark), and beside it,
        never counted as compiles, "rewritten": {kind: files a load rewrote in place} and "logs":
        {kind: log files written}. The rule, from what the engines were seen to write on an H200
        (scripts/census_h200.py): a new file is a compile product unless it is a log (*.log) or a
        lock (*.lock, or empty); an existing file rewritten is a compile product only if it is a
        binary one (.so .o .cubin .ptx .fatbin .hsaco: a JIT that rebuilt a module in place), else a
        rewrite on load (Inductor's .best_config and cache entries, ninja's state); FlashInfer's
        flashinfer_jit.log grows at every start.
pack    a tar (sorted, mtimes kept, owner 0) of the non-empty files under CACHE that SEED/cache lacks:
        what a run compiled, for `invoke warm`'s cache layer. Refuses (exit 3) above --max-bytes.

What census and pack write (--out, --listing) is written beside its path and renamed over it: a
link or FIFO there is replaced, never written through. Standard library only: the image's Python,
without servebuild installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tarfile

from servebuild_files import NotDirectory, NotRegular, load_json, open_dir, open_regular, write_file, write_new

MANIFEST = os.environ.get("SERVEBUILD_MANIFEST", "/opt/servebuild/manifest.json")
ORIGIN = os.path.join(".servebuild", "origin.json")


class BadInput(Exception):
    """What the caller gave cannot be used (one line, exit 2)."""


def unreadable(exc: OSError) -> None:
    raise exc  # a directory the walk cannot list: named (exit 1), never skipped into an undercount


def files_under(root: str) -> list[str]:
    found = []
    if not os.path.isdir(root):  # no seed in this image, no cache yet: nothing, not an error
        return found
    for d, dirs, files in os.walk(root, onerror=unreadable):
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
    try:  # never blocks on a FIFO there, never reads through a link there
        data = load_json(os.path.join(cache, ORIGIN))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def exists_at(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def copy_file(src: str, dir_fd: int, name: str, shown: str) -> None:
    """SRC as `name` in dir_fd, mode and mtime kept, under a temporary name renamed at the end (O_EXCL,
    never through a link); whatever fails, the temporary file goes and the error names the file."""
    st = os.lstat(src)
    temp = f"{name}.servebuild-seed.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as out, os.fdopen(open_regular(src), "rb") as source:
            shutil.copyfileobj(source, out, 1 << 20)
            out.flush()
            os.fchmod(out.fileno(), st.st_mode & 0o7777)
            os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))  # ninja-driven JITs compare mtimes
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror or str(exc), shown) from None
        raise


def seed_tree(source: str, root: str, src: str, dir_fd: int, shown: str) -> int:
    """Copy what SRC holds that dir_fd lacks; returns the count. A directory of the cache that is a link
    is refused (BadInput); a link in the seed is copied as a link only where it is relative and stays
    inside the seed, else skipped with a line; a FIFO or device in the seed is skipped with a line."""
    copied = 0
    with os.scandir(src) as entries:
        entries = sorted(entries, key=lambda e: e.name)
    for entry in entries:
        path, where = entry.path, os.path.join(shown, entry.name)
        if src == source and entry.name == ".servebuild":
            continue
        if entry.is_symlink():
            text = os.readlink(path)
            lexical = os.path.normpath(os.path.join(os.path.relpath(src, source), text))
            if os.path.isabs(text) or lexical.split(os.sep)[0] == ".." or not within(os.path.realpath(path), root):
                print(f"servebuild-cache: seed: {where} not copied: a link out of the seed ({text!r})", file=sys.stderr)
            elif not exists_at(entry.name, dir_fd):
                os.symlink(text, entry.name, dir_fd=dir_fd)
                copied += 1
        elif entry.is_dir(follow_symlinks=False):
            try:
                sub = open_dir(entry.name, dir_fd, create=True)
            except NotDirectory as exc:
                raise BadInput(f"{where} {exc.strerror}: nothing is written through it (remove it from the "
                               f"volume, or use a fresh one)") from None
            try:
                copied += seed_tree(source, root, path, sub, where)
            finally:
                os.close(sub)
        elif not entry.is_file(follow_symlinks=False):
            print(f"servebuild-cache: seed: {where} not copied: not a regular file", file=sys.stderr)
        elif not exists_at(entry.name, dir_fd):  # never overwrites: what a volume holds wins
            copy_file(path, dir_fd, entry.name, where)
            copied += 1
    return copied


def cache_root(cache: str) -> int:
    """The cache root's descriptor (made when missing); a link there is refused like one below it."""
    try:
        try:
            return open_dir(cache)
        except FileNotFoundError:
            os.makedirs(cache, exist_ok=True)
            return open_dir(cache)
    except NotDirectory as exc:
        raise BadInput(f"{cache} {exc.strerror}: nothing is written through it") from None


def seed(cache: str, seed_dir: str) -> int:
    source = os.path.join(seed_dir, "cache")
    shown_origin = os.path.join(cache, ORIGIN)
    root_fd = cache_root(cache)
    try:
        try:
            state = open_dir(".servebuild", root_fd, create=True)
        except NotDirectory as exc:
            raise BadInput(f"{os.path.join(cache, '.servebuild')} {exc.strerror}: nothing is written through it "
                           f"(remove it from the volume, or use a fresh one)") from None
        try:
            try:  # an origin is never rewritten, whichever image it names: warm refuses another image's cache
                origin = load_json("origin.json", state)
            except FileNotFoundError:
                origin = None
            except NotRegular:
                raise BadInput(f"{shown_origin} is not a regular file: nothing is read or written through it "
                               f"(remove it, or use a fresh volume)") from None
            except ValueError as exc:
                raise BadInput(f"{shown_origin} is not an origin seed wrote ({exc}): remove it, or use a fresh volume") from None
            if origin is not None and not isinstance(origin, dict):
                raise BadInput(f"{shown_origin} is not an origin seed wrote (not a JSON object): remove it, "
                               f"or use a fresh volume")
            copied = seed_tree(source, os.path.realpath(source), source, root_fd, cache) if os.path.isdir(source) else 0
            if origin is None:
                text = json.dumps({"manifest_sha256": manifest_sha256(), "image_id": os.environ.get("SERVEBUILD_IMAGE_ID")},
                                  sort_keys=True)
                write_new("origin.json", text.encode(), state)
        finally:
            os.close(state)
    finally:
        os.close(root_fd)
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


BINARY_PRODUCTS = (".so", ".o", ".cubin", ".ptx", ".fatbin", ".hsaco")


def change_of(rel: str, size: int, existed: bool) -> str | None:
    """What a file new (existed False) or rewritten since a listing is: "changed" (a compile product),
    "rewritten" (an existing file a load rewrote in place), "logs", or None (a lock)."""
    name = os.path.basename(rel)
    if name.endswith(".log") or ".log." in name:
        return "logs"
    if name.endswith(".lock") or size == 0:  # FlashInfer's FileLock, tvm-ffi's build lock, markers
        return None
    if not existed or name.endswith(BINARY_PRODUCTS):
        return "changed"
    return "rewritten"


def changes(before: dict, now: dict) -> dict:
    """{"changed": {kind: n}, "rewritten": {kind: n}, "logs": {kind: n}} between two listings."""
    out: dict[str, dict[str, int]] = {"changed": {}, "rewritten": {}, "logs": {}}
    for rel, stamp in now.items():
        if before.get(rel) == stamp:
            continue
        what = change_of(rel, stamp[0], rel in before)
        if what:
            out[what][kind_of(rel)] = out[what].get(kind_of(rel), 0) + 1
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
        out.update(changes(before, now))
    if listing:
        write_file(listing, json.dumps(now).encode())
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

    def fill(handle) -> None:
        with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in new:
                tar.add(os.path.join(cache, rel), arcname=rel, recursive=False, filter=owned)
    write_file(out, fill)
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
            write_file(args.out, (text + "\n").encode())
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
