"""The registry client: an authenticated session on one registry for `lock`, `publish` and `verify`.

Built on oras-py (auth handshake, blob upload, URLs) with our own transport rules: every request goes
through `_send`, which bounds it in time (deadline.py) and size (bounded.py), follows at most
`limits.REDIRECTS` redirects itself, and talks only to the registry and its token service (a blob
GET alone may be redirected to another HTTPS host, as Docker Hub and GHCR send blobs to a CDN; no
credentials go with it). Retries, TLS trust and one-line errors are ours too.
"""

from __future__ import annotations

import logging
import re
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Optional
from urllib.parse import urljoin, urlsplit

from servebuild.errors import HostError
from servebuild.fsutil import canonical_json, read_input, sha256_bytes, sha256_file
from servebuild.registry import limits
from servebuild.registry.bounded import BadJSON, TooLarge, parse_json, read_body
from servebuild.registry.deadline import Expired, deadline, remaining

MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
REDIRECT_CODES = (301, 302, 303, 307, 308)


class RegistryError(HostError):
    """The registry refused, could not be reached or could not be trusted."""


class LoginRefused(RegistryError):
    """The registry, or the token service it sends clients to, refused the credentials."""


class RegistryTimeout(RegistryError):
    """A request or a whole operation ran past its deadline."""


def _quiet_oras() -> None:
    log = logging.getLogger("oras.logger")
    log.handlers[:] = [logging.NullHandler()]
    log.propagate = False
    log.setLevel(logging.CRITICAL)


def is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    return host == "localhost" or host.startswith("127.")


class RegistryClient:
    """One registry, one set of credentials (or none: `anonymous`), one trust root.

    Scheme: HTTPS, verified against `ca` (a PEM bundle) or the default roots. A loopback registry
    that does not speak TLS at all is used over plain HTTP, as dockerd does; a TLS registry whose
    certificate does not verify is refused, never downgraded.
    Bounds (limits.py): each request `request_s` seconds from connect to last byte (default
    SERVEBUILD_REGISTRY_TIMEOUT or 60), each operation (`operation()`) `operation_s` (default
    SERVEBUILD_REGISTRY_DEADLINE or 600), a size limit per kind of answer.
    Retries: reset connections and 5xx answers are retried `retries` times with exponential backoff
    (`backoff` seconds, doubled each time) while the operation has time left; 4xx answers and
    requests that ran past their deadline or went silent are not retried.
    """

    def __init__(
        self,
        registry: str,
        creds=None,
        ca: Optional[Path] = None,
        retries: int = limits.RETRIES,
        backoff: float = 0.5,
        timeout: Optional[float] = None,
        anonymous: bool = False,
        operation_s: Optional[float] = None,
    ):
        import oras.provider
        import requests

        _quiet_oras()
        self.registry, self.creds, self.ca = registry, creds, ca
        self.retries, self.backoff = retries, backoff
        self.request_s = timeout or limits.seconds_from_env("SERVEBUILD_REGISTRY_TIMEOUT", limits.REQUEST_S)
        self.operation_s = operation_s or limits.seconds_from_env("SERVEBUILD_REGISTRY_DEADLINE", limits.OPERATION_S)
        self.blob_limit = limits.CONFIG_BYTES
        self.blob_sink = None  # a file a blob GET streams into (get_blob_into), else the body is held
        if ca is not None:  # the bounded reader: a FIFO, device, directory or huge file is refused unread
            if b"-----BEGIN CERTIFICATE-----" not in read_input(ca, "tls", field="--ca", error=RegistryError):
                raise RegistryError("CA file holds no PEM certificate", file=str(ca), field="--ca")
        self.insecure, self.realm = False, None
        self.verify: object = str(ca) if ca else True
        with self.operation(f"connecting to {registry}"):
            probe = requests.Session()
            self._bound(probe)
            challenge = self._probe(probe)
            backend = "token" if challenge.lower().startswith("bearer") else "basic"
            if backend == "token":  # where clients get their tokens (GHCR: https://ghcr.io/token)
                self.realm = dict(re.findall(r'(\w+)="([^"]*)"', challenge)).get("realm")
            outer = self

            class _Oras(oras.provider.Registry):
                def do_request(self, url, method="GET", data=None, headers=None, json=None, stream=False):
                    raw = oras.provider.Registry.do_request.__wrapped__  # oras-py's own retry waits minutes

                    def call():
                        try:
                            response = raw(self, url, method, data, dict(headers or {}), json, stream)
                            if response.status_code == 401 and getattr(self.auth, "token", None):
                                self.auth.token = None  # a bearer token for another scope: get one for this one
                                response = raw(self, url, method, data, dict(headers or {}), json, stream)
                            return response
                        except (ValueError, AttributeError, TypeError, RecursionError):
                            # oras-py: "Cannot respond to request for authentication.", or a token answer
                            # that is not a JSON object holding a usable token
                            raise LoginRefused(
                                f"{outer.registry} refused the login for {method} {_path(url)}", field="registry"
                            ) from None

                    return outer._retrying(call, method, url)

            self.oras = _Oras(hostname=registry, insecure=self.insecure, tls_verify=self.verify, auth_backend=backend)
            self._bound(self.oras.session)  # shared with the auth backend: token requests are bounded too
            if creds is not None:
                self.oras.auth.set_basic_auth(creds.username, creds.password)
            if challenge and not anonymous:
                self._check_login()

    # -- bounds ------------------------------------------------------------------------------------
    @contextmanager
    def operation(self, what: str):
        """Bound everything inside to `operation_s` seconds; past it, one line naming `what`."""
        try:
            with deadline(self.operation_s, what):
                yield
        except Expired as exc:
            raise self._expired(exc) from None

    def _expired(self, exc: Expired) -> RegistryTimeout:
        return RegistryTimeout(
            f"{self.registry}: {exc.what} did not finish within {exc.seconds:g} s",
            field="registry",
            hint="a registry that stalls or trickles is cut off at the "
            "deadline (SERVEBUILD_REGISTRY_TIMEOUT per request, SERVEBUILD_REGISTRY_DEADLINE "
            "per operation)",
        )

    def _bound(self, session) -> None:
        """Route every request of `session` through `_send` (requests has no default timeout)."""
        plain = session.request
        session.request = lambda method, url, **kwargs: self._send(plain, method, url, **kwargs)

    def _limit(self, method: str, url: str) -> tuple[int, str]:
        path = urlsplit(url).path
        if self._is_realm(url):
            return limits.TOKEN_BYTES, f"the token service's answer for {self.registry}"
        if "/manifests/" in path:
            return limits.MANIFEST_BYTES, f"manifest {_shown(path.rsplit('/manifests/', 1)[1])}"
        if "/referrers/" in path:
            return limits.REFERRERS_BYTES, f"the referrers of {_shown(path.rsplit('/', 1)[1])}"
        if path.endswith("/tags/list"):
            return limits.TAGS_BYTES, "the tag list"
        if "/blobs/" in path and "/blobs/uploads" not in path and method == "GET":
            return self.blob_limit, f"blob {_shown(path.rsplit('/', 1)[1])}"
        return limits.OTHER_BYTES, f"the answer to {method} {_shown(path)}"

    def _is_realm(self, url: str) -> bool:
        return bool(self.realm) and url.split("?")[0].rstrip("/") == self.realm.rstrip("/")

    def _allowed_host(self, url: str) -> bool:
        netloc = urlsplit(url).netloc
        return netloc == self.registry or bool(self.realm and netloc == urlsplit(self.realm).netloc)

    def _send(self, plain, method: str, url: str, **kwargs):
        """One request, bounded: deadline, size limit while reading, own redirect handling, host rule."""
        limit, what = self._limit(method, url)
        if not self._allowed_host(url):
            raise RegistryError(
                f"{self.registry} sent this client to {_shown(urlsplit(url).netloc)} for {what}; "
                f"only the registry and its token service are asked",
                field="registry",
            )
        kwargs.update(
            stream=True,
            allow_redirects=False,
            timeout=(min(limits.CONNECT_S, self.request_s), min(limits.IDLE_S, self.request_s)),
        )
        seen = {url}
        try:
            with deadline(self.request_s, f"{method} {_shown(_path(url))}"):
                for hop in range(limits.REDIRECTS + 1):
                    response = plain(method, url, **kwargs)
                    location = response.headers.get("Location")
                    if response.status_code not in REDIRECT_CODES or not location or "/blobs/uploads" in url:
                        sink = (
                            self.blob_sink if response.status_code == 200 and "/blobs/" in urlsplit(url).path else None
                        )
                        if sink is not None:  # a retry starts the file again
                            sink.seek(0)
                            sink.truncate()
                        response._content = b"" if method == "HEAD" else read_body(response, limit, what, sink)
                        response._content_consumed = True
                        if self._is_realm(url) and response.status_code == 200:
                            parse_json(response._content, what, limits.JSON_DEPTH)  # oras-py parses it unbounded
                        return response
                    response.close()
                    url, method, kwargs = self._redirect(
                        url, urljoin(url, location), method, kwargs, response.status_code, what
                    )
                    if url in seen:
                        raise RegistryError(f"{self.registry} redirects {what} in a loop", field="registry")
                    seen.add(url)
                raise RegistryError(
                    f"{self.registry} redirects {what} more than {limits.REDIRECTS} times", field="registry"
                )
        except Expired as exc:
            raise self._expired(exc) from None
        except (TooLarge, BadJSON) as exc:
            raise RegistryError(f"{self.registry}: {exc.problem}", field="registry") from None

    def _redirect(self, url: str, target: str, method: str, kwargs: dict, status: int, what: str):
        if urlsplit(target).scheme not in ("http", "https"):
            raise RegistryError(
                f"{self.registry} redirects {what} to a {_shown(urlsplit(target).scheme)}: URL", field="registry"
            )
        if urlsplit(target).netloc != urlsplit(url).netloc:
            blob = "/blobs/" in urlsplit(url).path and method in ("GET", "HEAD")
            if not blob or urlsplit(target).scheme != "https":
                raise RegistryError(
                    f"{self.registry} redirects {what} to {_shown(urlsplit(target).netloc)}; only "
                    f"a blob read may move to another host, over HTTPS",
                    field="registry",
                )
            # no credentials (from the headers or a session), and that host's certificate checked against the
            # CA or the default roots even where the registry itself is a plain-HTTP loopback one
            kwargs = {**kwargs, "auth": _no_credentials, "verify": str(self.ca) if self.ca else True}
        if status == 303:
            method = "GET"
        return target, method, kwargs

    # -- transport ---------------------------------------------------------------------------------
    def _retrying(self, call, method: str, url: str):
        import requests

        delay = self.backoff
        for attempt in range(self.retries + 1):
            last = attempt == self.retries or remaining() < delay + 1
            try:
                response = call()
            except requests.exceptions.SSLError as exc:
                raise self._tls_error(exc, url) from None
            except requests.exceptions.Timeout as exc:  # silent for IDLE_S: asking again would only wait again
                idle = min(limits.IDLE_S, self.request_s)
                raise RegistryTimeout(
                    f"{self._failed(exc, url)} sent nothing for {idle:g} s ({method} {_shown(_path(url))})",
                    field="registry",
                ) from None
            except (
                requests.exceptions.ConnectionError,
                requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ContentDecodingError,
                requests.exceptions.TooManyRedirects,
            ) as exc:
                if last:
                    raise RegistryError(
                        f"{self._failed(exc, url)} unreachable after {attempt + 1} tries "
                        f"({type(exc).__name__} on {method} {_shown(_path(url))})",
                        field="registry",
                    ) from None
            else:
                if response.status_code < 500 or last:
                    return response
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _failed(self, exc, url: str) -> str:
        """What did not answer: the registry, or the token service its Bearer challenge named (the realm)."""
        failed = getattr(getattr(exc, "request", None), "url", None) or url
        if self._is_realm(failed):
            return f"token service {_shown(self.realm)} of {self.registry}"
        return self.registry

    def _tls_error(self, exc, url: str) -> RegistryError:
        text = str(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
            how = f"the CA in {self.ca}" if self.ca else "the default roots (give the registry's CA with --ca FILE)"
            return RegistryError(
                f"untrusted certificate: {self._failed(exc, url)} does not verify against {how}", field="registry"
            )
        return RegistryError(f"TLS handshake with {self._failed(exc, url)} failed", field="registry")

    def _probe(self, session) -> str:
        """GET /v2/: settles the scheme, returns the auth challenge ('' for an open registry)."""
        for scheme in ("https", "http"):
            url = f"{scheme}://{self.registry}/v2/"
            try:
                response = self._retrying(lambda: session.get(url, verify=self.verify), "GET", url)
            except RegistryTimeout:
                raise
            except RegistryError as exc:
                # a loopback registry that does not speak TLS (plain HTTP) is used over HTTP, as dockerd does;
                # one that speaks TLS with an unknown CA is refused
                if (
                    scheme == "https"
                    and self.ca is None
                    and is_loopback(self.registry)
                    and "untrusted certificate" not in str(exc)
                    and "unreachable" not in str(exc)
                ):
                    self.insecure, self.verify = True, False
                    continue
                raise
            if response.status_code == 401:
                return response.headers.get("WWW-Authenticate", "basic")[:4096]
            if response.status_code != 200:
                raise RegistryError(
                    f"{self.registry} answered {response.status_code} on /v2/: not an OCI registry", field="registry"
                )
            return ""
        raise AssertionError("unreachable")

    def _check_login(self) -> None:
        if self.creds is None:
            raise RegistryError(
                f"no credentials for {self.registry}: the registry asks for a login; give "
                f"--credentials FILE or log in with `docker login {self.registry}`",
                field="registry",
            )
        try:
            refused = self.request("GET", "/v2/").status_code in (401, 403)
        except LoginRefused:  # a Bearer registry: its token service gave these credentials no token
            refused = True
        if refused:
            raise RegistryError(
                f"wrong credentials for {self.registry}: user {self.creds.username!r} "
                f"(from {self.creds.source}) was refused",
                field="registry",
            )

    @property
    def prefix(self) -> str:
        return f"{'http' if self.insecure else 'https'}://{self.registry}"

    def request(self, method: str, path: str, data: Optional[bytes] = None, headers: Optional[dict] = None):
        return self.oras.do_request(self.prefix + path, method, data=data, headers=dict(headers or {}))

    def _json(self, response, what: str, max_depth: int = limits.JSON_DEPTH):
        try:
            return parse_json(response.content, f"{what} from {self.registry}", max_depth)
        except BadJSON as exc:
            raise RegistryError(exc.problem, field="registry") from None

    def _fail(self, response, what: str) -> RegistryError:
        try:
            doc = parse_json(response.content, "error", limits.JSON_DEPTH)
            errors = doc.get("errors") if isinstance(doc, dict) else None
            detail = "; ".join(
                _shown(str(e.get("code", "")) + (": " + str(e.get("message")) if e.get("message") else ""), 200)
                for e in (errors if isinstance(errors, list) else [])[:5]
                if isinstance(e, dict)
            )
        except BadJSON:
            detail = ""
        return RegistryError(
            f"{what}: {self.registry} answered {response.status_code}" + (f" ({detail})" if detail else ""),
            field="registry",
        )

    # -- registry operations -----------------------------------------------------------------------
    def head_digest(self, repo: str, reference: str) -> Optional[str]:
        """The digest the registry gives for a tag (HEAD, no body read); None if the tag does not exist."""
        response = self.request("HEAD", f"/v2/{repo}/manifests/{reference}", headers={"Accept": MANIFEST_ACCEPT})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._fail(response, f"reading {repo}:{_shown(reference)}")
        digest = response.headers.get("Docker-Content-Digest", "")
        if not DIGEST.match(digest):
            raise RegistryError(
                f"{self.registry} gave no sha256 digest for {repo}:{_shown(reference)} "
                f"(Docker-Content-Digest {_shown(digest, 80)!r})",
                field="registry",
            )
        return digest

    def get_manifest(self, repo: str, reference: str) -> Optional[tuple[bytes, str, str]]:
        """(body, digest, media type) of a manifest or index by tag or digest; None if it does not exist.
        By digest, the body must hash to it; by tag, to the Docker-Content-Digest the registry names, if any."""
        response = self.request("GET", f"/v2/{repo}/manifests/{reference}", headers={"Accept": MANIFEST_ACCEPT})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._fail(response, f"reading {repo}:{_shown(reference)}")
        body = response.content
        digest = "sha256:" + sha256_bytes(body)
        claimed = reference if reference.startswith("sha256:") else response.headers.get("Docker-Content-Digest")
        if claimed and digest != claimed:
            raise RegistryError(
                f"{self.registry} served {repo}@{_shown(claimed, 80)} with content hashing to {digest}",
                field="registry",
            )
        doc = self._json(response, f"manifest {repo}:{_shown(reference)}")
        if not isinstance(doc, dict):
            raise RegistryError(f"{self.registry}/{repo}:{_shown(reference)} is not a JSON manifest", field="registry")
        media = doc.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0]
        return body, digest, str(media)

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        digest = "sha256:" + sha256_bytes(body)
        response = self.request(
            "PUT", f"/v2/{repo}/manifests/{reference}", data=body, headers={"Content-Type": media_type}
        )
        if response.status_code not in (200, 201, 202):
            raise self._fail(response, f"writing {repo}:{reference}")
        served = response.headers.get("Docker-Content-Digest")
        if served and served != digest:
            raise RegistryError(
                f"{self.registry} stored {repo}:{reference} as {_shown(served, 80)}, sent {digest}", field="registry"
            )
        return digest

    def get_blob(self, repo: str, digest: str, limit: int = limits.CONFIG_BYTES) -> bytes:
        if not DIGEST.match(digest):
            raise RegistryError(
                f"{self.registry}/{repo}: a manifest names blob {_shown(digest, 80)!r}, not a sha256 digest",
                field="registry",
            )
        self.blob_limit = limit
        try:
            response = self.request("GET", f"/v2/{repo}/blobs/{digest}")
        finally:
            self.blob_limit = limits.CONFIG_BYTES
        if response.status_code != 200:
            raise self._fail(response, f"reading blob {digest[:19]} of {repo}")
        body = response.content
        actual = "sha256:" + sha256_bytes(body)
        if actual != digest:
            raise RegistryError(
                f"{self.registry} served blob {digest} of {repo} with content hashing to {actual}", field="registry"
            )
        return body

    def get_blob_into(self, repo: str, digest: str, sink: BinaryIO, limit: int, seconds: float) -> None:
        """A blob streamed into `sink` (a binary file, never whole in memory) within `limit` bytes and
        `seconds` for the request (an image layer: limits.LAYER_BYTES, LAYER_S); its bytes must hash to `digest`."""
        if not DIGEST.match(digest):
            raise RegistryError(
                f"{self.registry}/{repo}: a manifest names blob {_shown(digest, 80)!r}, not a sha256 digest",
                field="registry",
            )
        saved = self.blob_limit, self.request_s, self.blob_sink
        self.blob_limit, self.request_s, self.blob_sink = limit, seconds, sink
        try:
            response = self.request("GET", f"/v2/{repo}/blobs/{digest}")
        finally:
            self.blob_limit, self.request_s, self.blob_sink = saved
        if response.status_code != 200:
            raise self._fail(response, f"reading blob {digest[:19]} of {repo}")
        sink.flush()
        actual = "sha256:" + sha256_file(Path(sink.name))
        if actual != digest:
            raise RegistryError(
                f"{self.registry} served blob {digest} of {repo} with content hashing to {actual}", field="registry"
            )

    def put_blob(self, repo: str, data: bytes) -> dict:
        """Upload (unless present) and return its descriptor fields (digest, size)."""
        import oras.container

        digest = "sha256:" + sha256_bytes(data)
        layer = {"digest": digest, "size": len(data), "mediaType": "application/octet-stream"}
        container = oras.container.Container(f"{self.registry}/{repo}")
        with tempfile.NamedTemporaryFile(prefix="servebuild-blob-") as fh:
            fh.write(data)
            fh.flush()
            response = self.oras.upload_blob(fh.name, container, layer)
        if response.status_code not in (200, 201, 202):
            raise self._fail(response, f"uploading blob {digest[:19]} to {repo}")
        return {"digest": digest, "size": len(data)}

    def tags(self, repo: str) -> list[str]:
        response = self.request("GET", f"/v2/{repo}/tags/list")
        if response.status_code == 404:
            return []
        if response.status_code != 200:
            raise self._fail(response, f"listing tags of {repo}")
        doc = self._json(response, f"the tag list of {repo}")
        tags = doc.get("tags") if isinstance(doc, dict) else None
        return sorted(t for t in (tags if isinstance(tags, list) else []) if isinstance(t, str))

    def referrers(self, repo: str, digest: str) -> tuple[list[dict], bool]:
        """Descriptors of manifests whose subject is `digest`: (list, True) from the referrers API when the
        registry has it, else (list, False) from the referrers tag schema (`sha256-<hex>`)."""
        response = self.request("GET", f"/v2/{repo}/referrers/{digest}", headers={"Accept": OCI_INDEX})
        if response.status_code == 200 and response.headers.get("Content-Type", "").startswith(OCI_INDEX):
            return _descriptors(self._json(response, f"the referrers of {digest[:19]}")), True
        found = self.get_manifest(repo, referrers_tag(digest))
        if found is None:
            return [], False
        return _descriptors(parse_json(found[0], "referrers", limits.JSON_DEPTH)), False


def _no_credentials(request):
    """requests auth hook for a request to another host: whatever set an Authorization header, drop it."""
    request.headers.pop("Authorization", None)
    return request


def _descriptors(doc) -> list[dict]:
    manifests = doc.get("manifests") if isinstance(doc, dict) else None
    return [d for d in (manifests if isinstance(manifests, list) else []) if isinstance(d, dict)]


def referrers_tag(digest: str) -> str:
    return digest.replace(":", "-", 1)


def _path(url: str) -> str:
    return "/" + url.split("/", 3)[3] if url.count("/") >= 3 else url


def _shown(text: str, width: int = 120) -> str:
    """Text from the registry, safe on one line: printable, bounded."""
    text = "".join(c if c.isprintable() else "?" for c in str(text))
    return text if len(text) <= width else text[:width] + "…"


def canonical_bytes(data) -> bytes:
    return canonical_json(data).encode()
