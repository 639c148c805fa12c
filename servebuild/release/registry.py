"""Registry HTTP API.

`RegistryClient` (for `publish` and `verify`): an authenticated session on one registry built on
oras-py (auth handshake, blob upload, URLs), with our own bounded retries, TLS trust and one-line errors.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from pathlib import Path
from typing import Optional

from servebuild.errors import HostError
from servebuild.fsutil import canonical_json, sha256_bytes
from servebuild.lock.basedigest import MANIFEST_ACCEPT









# ---------------------------------------------------------------------------------------------------
# Authenticated client for publish/verify

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")


class RegistryError(HostError):
    """The registry refused, could not be reached or could not be trusted."""


class LoginRefused(RegistryError):
    """The registry, or the token service it sends clients to, refused the credentials."""


def _quiet_oras() -> None:
    log = logging.getLogger("oras.logger")
    log.handlers[:] = [logging.NullHandler()]
    log.propagate = False
    log.setLevel(logging.CRITICAL)


def is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    return host == "localhost" or host.startswith("127.")


class RegistryClient:
    """One registry, one set of credentials, one trust root.

    Scheme: HTTPS, verified against `ca` (a PEM bundle) or the default roots. A loopback registry
    that does not speak TLS at all is used over plain HTTP, as dockerd does; a TLS registry whose
    certificate does not verify is refused, never downgraded.
    Retries: connection resets and 5xx answers are retried `retries` times with exponential backoff
    (`backoff` seconds, doubled each time); 4xx answers are not retried.
    """

    def __init__(self, registry: str, creds=None, ca: Optional[Path] = None, retries: int = 4,
                 backoff: float = 0.5, timeout: float = 60.0):
        import oras.provider
        _quiet_oras()
        self.registry, self.creds, self.ca = registry, creds, ca
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        if ca is not None:
            if not ca.is_file():
                raise RegistryError("CA file does not exist or is not a regular file", file=str(ca), field="--ca")
            head = ca.read_bytes()[:1 << 20]
            if b"-----BEGIN CERTIFICATE-----" not in head:
                raise RegistryError("CA file holds no PEM certificate", file=str(ca), field="--ca")
        self.insecure, self.realm = False, None
        self.verify: object = str(ca) if ca else True
        challenge = self._probe()
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
                            self.auth.token = None  # a bearer token for another scope: get one for this request
                            response = raw(self, url, method, data, dict(headers or {}), json, stream)
                        return response
                    except ValueError:  # oras-py: "Cannot respond to request for authentication."
                        raise LoginRefused(f"{outer.registry} refused the login for {method} {_path(url)}",
                                           field="registry") from None
                return outer._retrying(call, method, url)

        self.oras = _Oras(hostname=registry, insecure=self.insecure, tls_verify=self.verify, auth_backend=backend)
        session_request = self.oras.session.request  # shared with the auth backend; requests has no default timeout

        def request_with_timeout(method, url, **kwargs):
            kwargs.setdefault("timeout", timeout)
            return session_request(method, url, **kwargs)
        self.oras.session.request = request_with_timeout
        if creds is not None:
            self.oras.auth.set_basic_auth(creds.username, creds.password)
        if challenge:
            self._check_login()

    # -- transport ---------------------------------------------------------------------------------
    def _retrying(self, call, method: str, url: str):
        import requests
        delay = self.backoff
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = call()
            except requests.exceptions.SSLError as exc:
                raise self._tls_error(exc, url) from None
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                    requests.exceptions.ChunkedEncodingError) as exc:
                if last:
                    raise RegistryError(f"{self._failed(exc, url)} unreachable after {self.retries + 1} tries "
                                        f"({type(exc).__name__} on {method} {_path(url)})", field="registry") from None
            else:
                if response.status_code < 500 or last:
                    return response
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _failed(self, exc, url: str) -> str:
        """What did not answer: the registry, or the token service its Bearer challenge named (the realm)."""
        failed = getattr(getattr(exc, "request", None), "url", None) or url
        if self.realm and failed.split("?")[0].rstrip("/") == self.realm.rstrip("/"):
            return f"token service {self.realm} of {self.registry}"
        return self.registry

    def _tls_error(self, exc, url: str) -> RegistryError:
        text = str(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
            how = f"the CA in {self.ca}" if self.ca else "the default roots (give the registry's CA with --ca FILE)"
            return RegistryError(f"untrusted certificate: {self._failed(exc, url)} does not verify against {how}",
                                 field="registry")
        return RegistryError(f"TLS handshake with {self._failed(exc, url)} failed", field="registry")

    def _probe(self) -> str:
        """GET /v2/: settles the scheme, returns the auth challenge ('' for an open registry)."""
        import requests
        session = requests.Session()
        for scheme in ("https", "http"):
            url = f"{scheme}://{self.registry}/v2/"
            try:
                response = self._retrying(lambda: session.get(url, verify=self.verify, timeout=self.timeout),
                                          "GET", url)
            except RegistryError as exc:
                # a loopback registry that does not speak TLS (plain HTTP) is used over HTTP, as dockerd does;
                # one that speaks TLS with an unknown CA is refused
                if scheme == "https" and self.ca is None and is_loopback(self.registry) \
                        and "untrusted certificate" not in str(exc) and "unreachable" not in str(exc):
                    self.insecure, self.verify = True, False
                    continue
                raise
            if response.status_code == 401:
                return response.headers.get("WWW-Authenticate", "basic")
            if response.status_code != 200:
                raise RegistryError(f"{self.registry} answered {response.status_code} on /v2/: not an OCI registry",
                                    field="registry")
            return ""
        raise AssertionError("unreachable")

    def _check_login(self) -> None:
        if self.creds is None:
            raise RegistryError(f"no credentials for {self.registry}: the registry asks for a login; give "
                                f"--credentials FILE or log in with `docker login {self.registry}`",
                                field="registry")
        try:
            refused = self.request("GET", "/v2/").status_code in (401, 403)
        except LoginRefused:  # a Bearer registry: its token service gave these credentials no token
            refused = True
        if refused:
            raise RegistryError(f"wrong credentials for {self.registry}: user {self.creds.username!r} "
                                f"(from {self.creds.source}) was refused", field="registry")

    @property
    def prefix(self) -> str:
        return f"{'http' if self.insecure else 'https'}://{self.registry}"

    def request(self, method: str, path: str, data: Optional[bytes] = None, headers: Optional[dict] = None):
        return self.oras.do_request(self.prefix + path, method, data=data, headers=dict(headers or {}))

    def _fail(self, response, what: str) -> RegistryError:
        try:
            errors = response.json().get("errors") or []
            detail = "; ".join(str(e.get("code", "")) + (": " + str(e.get("message"))
                                                          if e.get("message") else "") for e in errors)
        except ValueError:
            detail = ""
        return RegistryError(f"{what}: {self.registry} answered {response.status_code}"
                             + (f" ({detail})" if detail else ""), field="registry")

    # -- registry operations -----------------------------------------------------------------------
    def get_manifest(self, repo: str, reference: str) -> Optional[tuple[bytes, str, str]]:
        """(body, digest, media type) of a manifest or index by tag or digest; None if it does not exist."""
        response = self.request("GET", f"/v2/{repo}/manifests/{reference}", headers={"Accept": MANIFEST_ACCEPT})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._fail(response, f"reading {repo}:{reference}")
        body = response.content
        digest = "sha256:" + sha256_bytes(body)
        if reference.startswith("sha256:") and digest != reference:
            raise RegistryError(f"{self.registry} served {repo}@{reference} with content hashing to {digest}",
                                field="registry")
        media = response.headers.get("Content-Type", "").split(";")[0]
        try:
            media = json.loads(body).get("mediaType") or media
        except (ValueError, AttributeError):
            raise RegistryError(f"{repo}:{reference} is not a JSON manifest", field="registry") from None
        return body, digest, media

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        digest = "sha256:" + sha256_bytes(body)
        response = self.request("PUT", f"/v2/{repo}/manifests/{reference}", data=body,
                                headers={"Content-Type": media_type})
        if response.status_code not in (200, 201, 202):
            raise self._fail(response, f"writing {repo}:{reference}")
        served = response.headers.get("Docker-Content-Digest")
        if served and served != digest:
            raise RegistryError(f"{self.registry} stored {repo}:{reference} as {served}, sent {digest}",
                                field="registry")
        return digest

    def get_blob(self, repo: str, digest: str, limit: int = 64 << 20) -> bytes:
        response = self.request("GET", f"/v2/{repo}/blobs/{digest}")
        if response.status_code != 200:
            raise self._fail(response, f"reading blob {digest[:19]} of {repo}")
        body = response.content
        if len(body) > limit:
            raise RegistryError(f"blob {digest} of {repo} is larger than {limit} bytes", field="registry")
        actual = "sha256:" + sha256_bytes(body)
        if actual != digest:
            raise RegistryError(f"blob {digest} of {repo} was served with content hashing to {actual}",
                                field="registry")
        return body

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
        return sorted(response.json().get("tags") or [])

    def referrers(self, repo: str, digest: str) -> tuple[list[dict], bool]:
        """Descriptors of manifests whose subject is `digest`: (list, True) from the referrers API when the
        registry has it, else (list, False) from the referrers tag schema (`sha256-<hex>`)."""
        response = self.request("GET", f"/v2/{repo}/referrers/{digest}", headers={"Accept": OCI_INDEX})
        if response.status_code == 200 and response.headers.get("Content-Type", "").startswith(OCI_INDEX):
            return list(response.json().get("manifests") or []), True
        found = self.get_manifest(repo, referrers_tag(digest))
        if found is None:
            return [], False
        return list(json.loads(found[0]).get("manifests") or []), False


def referrers_tag(digest: str) -> str:
    return digest.replace(":", "-", 1)


def _path(url: str) -> str:
    return "/" + url.split("/", 3)[3] if url.count("/") >= 3 else url


def canonical_bytes(data) -> bytes:
    return canonical_json(data).encode()
