"""The registry HTTP API, bounded — one client for `lock` (base digests), `publish` and `verify`; and the
same bounds for package-index pages and release downloads (index.py).

In: a registry address, credentials (or none), a trust root; requests for manifests, blobs, tags, referrers.
Out: their bytes, checked against their digests, or one line naming the registry, the object and the bound
it broke. Every answer is read under a deadline per request and per operation (deadline.py) and a size
limit applied while reading (bounded.py); redirects, JSON depth and retries are bounded; limits.py holds
every figure (the table in docs/reference/registry-limits.md).
Reads: the ground (errors, fsutil).
"""
