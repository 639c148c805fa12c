"""A real registry with TLS (a private CA made in the test) and htpasswd basic auth.

Debian's docker-registry (distribution 2.8) on 127.0.0.1; the CA and server certificate come from
`trustme`; dockerd is told to trust the CA through /etc/docker/certs.d/127.0.0.1:PORT/ca.crt, which
`stop()` removes. The process can be killed and started again on the same port and storage (fault
tests). Every started process (and the engine's CA folder) is also removed at interpreter exit, so
none outlives the tests (no PR_SET_PDEATHSIG: it fires when the starting *thread* ends, and the
fault test restarts the registry from a timer thread).

`TokenRegistry` is the same registry with bearer-token auth instead (as GHCR and Docker Hub use), its
tokens issued by `TokenServer`, a small token service in the test process.
"""

from __future__ import annotations

import atexit
import base64
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

from support import free_port

CERTS_D = Path("/etc/docker/certs.d")
_LIVE: set[subprocess.Popen] = set()
_CERT_DIRS: set[Path] = set()


def _kill_all() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for folder in list(_CERT_DIRS):
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(_kill_all)


class TLSRegistry:
    def __init__(self, root: Path, users: Optional[dict[str, str]] = None, trust_engine: bool = True):
        import trustme

        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.cert_file, self.key_file = root / "server.crt", root / "server.key"
        cert.cert_chain_pems[0].write_to_path(str(self.cert_file))
        for extra in cert.cert_chain_pems[1:]:
            extra.write_to_path(str(self.cert_file), append=True)
        cert.private_key_pem.write_to_path(str(self.key_file))
        self.key_pem = cert.private_key_pem.bytes()
        self.ca_key_pem = self.ca.private_key_pem.bytes()
        self.users = users or {}
        self.config = root / "config.yml"
        self.config.write_text(
            f"version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {root}/data}}\n"
            f"  delete: {{enabled: true}}\nhttp:\n  addr: 127.0.0.1:{self.port}\n"
            f"  tls: {{certificate: {self.cert_file}, key: {self.key_file}}}\n{self._auth()}"
        )
        self.engine_ca: Optional[Path] = None
        if trust_engine:
            self.trust_engine()
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    def _auth(self) -> str:
        """The config's `auth:` section: htpasswd basic auth when there are users."""
        if not self.users:
            return ""
        htpasswd = self.root / "htpasswd"
        for i, (user, password) in enumerate(self.users.items()):
            # -i: the password on stdin, never on a command line
            subprocess.run(
                ["htpasswd", "-iB" + ("c" if i == 0 else ""), str(htpasswd), user],
                input=password,
                text=True,
                check=True,
                capture_output=True,
            )
        return f"auth: {{htpasswd: {{realm: test, path: {htpasswd}}}}}\n"

    def trust_engine(self) -> None:
        folder = CERTS_D / self.address
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.ca_file, folder / "ca.crt")
        self.engine_ca = folder
        _CERT_DIRS.add(folder)

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return  # already serving (a restart after a kill that never happened)
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "registry.log", "ab"),
            start_new_session=True,
        )
        _LIVE.add(self.proc)
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        for _ in range(150):
            try:
                urllib.request.urlopen(f"https://{self.address}/v2/", timeout=1, context=ctx)
                return
            except urllib.error.HTTPError:
                return  # 401: up, asking for a login
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"docker-registry did not start; see {self.root / 'registry.log'}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None:
            _LIVE.discard(self.proc)

    def stop(self) -> None:
        self.kill()
        if self.engine_ca is not None:
            shutil.rmtree(self.engine_ca, ignore_errors=True)
            _CERT_DIRS.discard(self.engine_ca)
            self.engine_ca = None

    # -- direct reads for assertions (independent of servebuild's client) --------------------------
    def _get(self, path: str, user: Optional[str] = None, accept: str = "") -> tuple[int, bytes, dict]:
        user = user or next(iter(self.users), None)
        headers = {"Accept": accept} if accept else {}
        if user:
            headers["Authorization"] = "Basic " + _basic(user, self.users[user])
        return _https_get(f"https://{self.address}{path}", headers, self.ca_file)

    def catalog(self) -> list[str]:
        code, body, _ = self._get("/v2/_catalog")
        assert code == 200, (code, body)
        return json.loads(body).get("repositories") or []

    def tags(self, repo: str) -> list[str]:
        code, body, _ = self._get(f"/v2/{repo}/tags/list")
        if code == 404:
            return []
        assert code == 200, (code, body)
        return sorted(json.loads(body).get("tags") or [])

    def manifest(self, repo: str, ref: str) -> tuple[int, bytes]:
        accept = (
            "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
            "application/vnd.docker.distribution.manifest.v2+json"
        )
        code, body, _ = self._get(f"/v2/{repo}/manifests/{ref}", accept=accept)
        return code, body

    def blob_path(self, digest: str) -> Path:
        hexd = digest.split(":", 1)[1]
        return self.root / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexd[:2] / hexd / "data"


SERVICE = "servebuild-test-registry"  # the registry's `service`: a token's audience
ISSUER = "servebuild-test-token-service"  # a token's `iss`, as the registry expects it


class TokenServer:
    """A stand-in for GHCR's token service (ghcr.io/token cannot be reached from here), on 127.0.0.1
    over TLS with a certificate of the registry's private CA.

    `GET /token?service=S&scope=repository:NAME:pull,push` with HTTP basic credentials: wrong or no
    credentials get 401; a user gets a JWT granting, of the scopes asked for, only pull and push on the
    repositories it may access (`access`: user -> repository names; a user not named there may access
    all), and `registry:catalog:*` (the tests' own reads). The JWT is ES256, signed by a key whose
    certificate (header `x5c`) comes from a signing CA of its own: the registry's `rootcertbundle`.
    `stop()` takes it down; `start()` brings it back on the same port.
    """

    def __init__(self, root: Path, tls_ca, users: dict[str, str], access: Optional[dict[str, set[str]]] = None):
        import trustme
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import Encoding, load_pem_private_key

        self.users, self.access = users, access or {}
        self.port = free_port()
        self.realm = f"https://127.0.0.1:{self.port}/token"
        self.tls_cert = tls_ca.issue_cert("127.0.0.1", "localhost")
        signing_ca = trustme.CA()
        self.root_cert = root / "token-signing-ca.pem"
        signing_ca.cert_pem.write_to_path(str(self.root_cert))
        signer = signing_ca.issue_cert("token-signer")  # ECDSA P-256: ES256
        self.key = load_pem_private_key(signer.private_key_pem.bytes(), None)
        self.x5c = [
            base64.b64encode(x509.load_pem_x509_certificate(pem.bytes()).public_bytes(Encoding.DER)).decode()
            for pem in signer.cert_chain_pems
        ]
        self.issued: list[tuple[str, str, list[dict]]] = []  # (user, User-Agent, access) of every token
        self.server: Optional[http.server.ThreadingHTTPServer] = None
        self.start()

    def login(self, authorization: str) -> Optional[str]:
        """The user whose basic credentials these are, or None."""
        if not authorization.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(authorization[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        known = self.users.get(user)
        return user if known is not None and secrets.compare_digest(known.encode(), password.encode()) else None

    def grant(self, user: str, scopes: list[str]) -> list[dict]:
        """The token's `access`: what `user` may do, of what it asked for."""
        access = []
        for scope in scopes:  # TYPE:NAME:ACTIONS
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            if kind == "repository" and (user not in self.access or name in self.access[user]):
                allowed = [a for a in actions.split(",") if a in ("pull", "push")]
            else:
                allowed = ["*"] if (kind, name, actions) == ("registry", "catalog", "*") else []
            if allowed:
                access.append({"type": kind, "name": name, "actions": allowed})
        return access

    def token(self, user: str, access: list[dict]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": user,
            "aud": SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(16),
            "access": access,
        }
        header = {"typ": "JWT", "alg": "ES256", "x5c": self.x5c}
        signed = ".".join(_b64url(json.dumps(part).encode()) for part in (header, claims))
        r, s = decode_dss_signature(self.key.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
        return signed + "." + _b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))  # JWS: r || s

    def start(self) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls_cert.configure_cert(ctx)
        self.server = _TLSServer(("127.0.0.1", self.port), _TokenHandler)
        self.server.tokens, self.server.ssl_context = self, ctx
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class _TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def finish_request(self, request, client_address) -> None:
        with self.ssl_context.wrap_socket(request, server_side=True) as tls:  # the handshake in the request's thread
            super().finish_request(tls, client_address)

    def handle_error(self, request, client_address) -> None:
        pass  # a client that hung up or refused the certificate


class _TokenHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        tokens, url = self.server.tokens, urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path != "/token" or query.get("service") != [SERVICE]:
            return self._answer(404, {"details": "no such token service"})
        user = tokens.login(self.headers.get("Authorization", ""))
        if user is None:
            return self._answer(401, {"details": "wrong credentials"}, {"WWW-Authenticate": 'Basic realm="token"'})
        access = tokens.grant(user, [scope for value in query.get("scope", []) for scope in value.split()])
        tokens.issued.append((user, self.headers.get("User-Agent", ""), access))
        token = tokens.token(user, access)
        self._answer(200, {"token": token, "access_token": token, "expires_in": 300})

    def _answer(self, code: int, body: dict, headers: Optional[dict] = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        for key, value in {
            "Content-Type": "application/json",
            "Content-Length": str(len(data)),
            **(headers or {}),
        }.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


class TokenRegistry(TLSRegistry):
    """The registry with bearer-token auth (`auth: token`), as GHCR and Docker Hub use: it answers 401 with
    `WWW-Authenticate: Bearer realm=...,service=...,scope=...`; the client gets a JWT for that scope from
    the realm (`self.tokens`, a `TokenServer`) with its basic credentials and asks again with it."""

    def __init__(
        self, root: Path, users: dict[str, str], access: Optional[dict[str, set[str]]] = None, trust_engine: bool = True
    ):
        self.access = access
        super().__init__(root, users, trust_engine)

    def _auth(self) -> str:
        self.tokens = TokenServer(self.root, self.ca, self.users, self.access)
        return (
            f'auth:\n  token: {{realm: "{self.tokens.realm}", service: {SERVICE}, issuer: {ISSUER}, '
            f"rootcertbundle: {self.tokens.root_cert}}}\n"
        )

    def stop(self) -> None:
        super().stop()
        self.tokens.stop()

    def _get(self, path: str, user: Optional[str] = None, accept: str = "") -> tuple[int, bytes, dict]:
        """As a client reads: on a Bearer challenge, a token for its scope from the realm, and again."""
        user = user or next(iter(self.users))
        headers = {"Accept": accept} if accept else {}
        code, body, answer = _https_get(f"https://{self.address}{path}", headers, self.ca_file)
        challenge = next((v for k, v in answer.items() if k.lower() == "www-authenticate"), "")
        if code != 401 or not challenge.startswith("Bearer "):
            return code, body, answer
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        query = urllib.parse.urlencode({"service": params["service"], "scope": params.get("scope", "")})
        code, body, _ = _https_get(
            f"{params['realm']}?{query}", {"Authorization": "Basic " + _basic(user, self.users[user])}, self.ca_file
        )
        assert code == 200, (code, body)
        headers["Authorization"] = "Bearer " + json.loads(body)["token"]
        return _https_get(f"https://{self.address}{path}", headers, self.ca_file)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _https_get(url: str, headers: dict, ca_file: Path) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url, headers=headers)
    ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def new_password() -> str:
    return "pw-" + secrets.token_urlsafe(18)


def write_credentials(path: Path, username: str, password: str, mode: int = 0o600) -> Path:
    path.write_text(json.dumps({"username": username, "password": password}))
    path.chmod(mode)
    return path
