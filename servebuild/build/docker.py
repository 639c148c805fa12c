"""The Docker engine: find a BuildKit-capable client, build, inspect, tag.

Two ways to the same engine, each where it fits:
- the docker CLI for what only it does: BuildKit builds (secrets, cache mounts, --platform; the
  SDK's build uses the classic builder), pushes with the client's credential store, and every
  command on an ssh:// endpoint (the CLI's ssh transport with our BatchMode shim);
- the Docker SDK for Python (docker-py) for the API calls it makes without parsing CLI output:
  info, image inspect, tag, remove, and throwaway containers (create, start, wait, logs, remove),
  on the local socket and on tcp:// endpoints with mutual TLS.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, TextIO

import docker as docker_sdk
import docker.errors as sdk_errors
import requests.exceptions

from servebuild import procs
from servebuild.errors import DockerError, DockerTimeout
from servebuild.fsutil import open_host_file, writing

DOCKER_HOST_HELP = "start dockerd (see docs/reference/host.md: Prerequisites) or set DOCKER_HOST"


@dataclass
class BuildRequest:
    context: Path
    platform: str
    build_args: dict[str, str]
    labels: dict[str, str]
    secrets: dict[str, Path]
    no_cache: bool = False
    cache_from: tuple[str, ...] = ()
    target: Optional[str] = None
    inline_cache: bool = False  # embed BuildKit cache metadata in the image (for a registry cache ref)
    network: Optional[str] = None  # RUN steps' network (`host` on engines without a bridge network)
    notes: tuple[str, ...] = ()  # servebuild's own lines before BuildKit's (which stages a variant shares)


@dataclass(frozen=True)
class Endpoint:
    """An engine reached by DOCKER_HOST: unix:///path, ssh://[user@]host[:port] or tcp://host:port + TLS.

    `ca`/`cert`/`key` are checked paths (farm.py checks them); the key's content is never read here.
    `ssh_config` is an ssh_config(5) file the ssh transport reads instead of ~/.ssh/config.
    """

    host: str
    ca: Optional[Path] = None
    cert: Optional[Path] = None
    key: Optional[Path] = None
    network: Optional[str] = None
    ssh_config: Optional[Path] = None

    def __str__(self) -> str:
        return self.host


# the client's own variables that would otherwise leak from the caller's environment into an endpoint
_ENDPOINT_VARS = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_TLS", "DOCKER_CONTEXT")


def _client_candidates() -> list[str]:
    env = os.environ.get("SERVEBUILD_DOCKER")
    if env:
        if shutil.which(env) is None:  # a path, or a name on PATH, of an executable file
            raise DockerError(f"{env!r} is not an executable docker client", field="$SERVEBUILD_DOCKER")
        return [env]
    found = ["/usr/bin/docker"]  # Debian's client builds with its built-in BuildKit frontend
    on_path = shutil.which("docker")
    if on_path and on_path not in found:
        found.append(on_path)
    return [c for c in found if Path(c).exists()]


FIND_CLIENT_SECONDS = 120  # `docker build --help` (it pings the engine) when the caller gave no bound


class DockerClient:
    """One Docker engine reached through a client that builds with BuildKit."""

    def __init__(
        self, client: Optional[str] = None, endpoint: Optional[Endpoint] = None, timeout: Optional[float] = None
    ):
        """No endpoint: the engine the caller's environment names (DOCKER_HOST or the local socket).
        An endpoint: that engine only. `timeout`, where given, bounds every non-build command (the ping
        included) on either."""
        self.endpoint = endpoint
        self.timeout = timeout
        self._endpoint_env = self._endpoint_variables(endpoint) if endpoint else {}
        self.client = client or self._find_client()
        self._ping()
        self._api = None if endpoint is not None and endpoint.host.startswith("ssh://") else self._connect_api()

    def _connect_api(self):
        """An SDK client for the engine the CLI just answered for (DOCKER_HOST and TLS as the CLI sees them);
        None (the CLI serves every call) where the SDK cannot read the user's Docker config, which it
        parses for credentials it is never asked to use here; the credential checks of `publish` name
        what is wrong with that file."""
        env = {k: v for k, v in self._env().items() if k in _ENDPOINT_VARS}
        try:
            api = docker_sdk.APIClient(
                **docker_sdk.utils.kwargs_from_env(environment=env),
                timeout=int(self.timeout or 120),
                version=docker_sdk.constants.MINIMUM_DOCKER_API_VERSION,
            )  # asked below
        except (sdk_errors.DockerException, ValueError):  # a malformed ~/.docker/config.json (auths, proxies)
            return None
        api.trust_env = False  # the engine's own CA and no proxy: never REQUESTS_CA_BUNDLE or HTTPS_PROXY
        try:  # the engine's API version, asked once the session trusts only the engine's CA
            api._version = api._retrieve_server_version()
        except (sdk_errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            raise DockerError(
                f"engine {self.name} not reachable through its API: {_flat(exc)}", field="engine"
            ) from None
        return api

    def _sdk(self, what: str, call, *args, **kwargs):
        """One SDK call; an engine error or a broken connection is one DockerError line."""
        try:
            return call(*args, **kwargs)
        except sdk_errors.APIError as exc:
            raise DockerError(f"docker {what} failed: {_flat(exc.explanation or exc)}", field="engine") from None
        except (sdk_errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            raise DockerError(f"engine {self.name} did not answer `{what}`: {_flat(exc)}", field="engine") from None

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}
        if self.endpoint is not None:
            for var in _ENDPOINT_VARS:
                env.pop(var, None)
            env.update(self._endpoint_env)
        return env

    def _endpoint_variables(self, endpoint: Endpoint) -> dict[str, str]:
        env = {"DOCKER_HOST": endpoint.host}
        if endpoint.host.startswith("ssh://"):
            return {**env, "PATH": self._ssh_shim(endpoint)}
        if endpoint.ca is None:
            return env
        # the 20.10 client reads ca.pem, cert.pem and key.pem from one directory
        wanted = {"ca.pem": endpoint.ca, "cert.pem": endpoint.cert, "key.pem": endpoint.key}
        wanted = {name: path for name, path in wanted.items() if path is not None}
        folders = {path.parent for path in wanted.values()}
        if len(folders) == 1 and all(path.name == name for name, path in wanted.items()):
            cert_dir = folders.pop()
        else:  # a private (0700) directory of links, removed with the client; no key bytes are copied
            cert_dir = Path(tempfile.mkdtemp(prefix="servebuild-tls."))
            weakref.finalize(self, shutil.rmtree, str(cert_dir), True)
            for name, path in wanted.items():
                (cert_dir / name).symlink_to(path)
        return {**env, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(cert_dir)}

    def _ssh_shim(self, endpoint: Endpoint) -> str:
        """PATH with a private `ssh` first: the docker client runs `ssh ... docker system dial-stdio`,
        and the shim adds BatchMode (never a password or host-key prompt) and the farm's ssh_config."""
        real = shutil.which("ssh")
        if real is None:
            raise DockerError(f"engine {endpoint} needs an ssh client; install openssh-client", field="engine")
        folder = Path(tempfile.mkdtemp(prefix="servebuild-ssh."))
        weakref.finalize(self, shutil.rmtree, str(folder), True)
        args = [real, "-o", "BatchMode=yes"] + (["-F", str(endpoint.ssh_config)] if endpoint.ssh_config else [])
        shim = folder / "ssh"
        shim.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in args) + ' "$@"\n')
        shim.chmod(0o700)
        return f"{folder}{os.pathsep}{os.environ.get('PATH', os.defpath)}"

    @property
    def name(self) -> str:
        return str(self.endpoint) if self.endpoint else "local engine"

    def _find_client(self) -> str:
        candidates = _client_candidates()
        if not candidates:
            raise DockerError(
                "no docker client found; install docker.io (which ships a BuildKit client) or set SERVEBUILD_DOCKER",
                field="engine",
            )
        env = self._env()
        if self.endpoint is not None:  # `build --help` needs no engine; a silent endpoint must not stall it
            env = {k: v for k, v in env.items() if k not in _ENDPOINT_VARS}
        for client in candidates:
            try:  # the client asks the engine (DOCKER_HOST) here too: one that never answers must not stall it
                proc = subprocess.run(
                    [client, "build", "--help"],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout or FIND_CLIENT_SECONDS,
                )
            except subprocess.TimeoutExpired:
                raise DockerTimeout(
                    f"engine {self.name} did not answer `docker build --help` through {client} "
                    f"within {self.timeout or FIND_CLIENT_SECONDS:.0f}s",
                    field="engine",
                ) from None
            except OSError as exc:  # not executable after all (a bad interpreter line, a format it cannot run)
                raise DockerError(f"cannot run docker client {client}: {exc.strerror or exc}", field="engine") from None
            if proc.returncode == 0 and "--secret" in proc.stdout:
                return client
        raise DockerError(
            f"no docker client with BuildKit among {', '.join(candidates)} (`build` lacks "
            f"--secret); install docker.io or the buildx plugin, or set SERVEBUILD_DOCKER",
            field="engine",
        )

    def _ping(self) -> None:
        proc = self.run("version", "--format", "{{.Server.Version}}", check=False)
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
            if self.endpoint is not None:
                raise DockerError(f"engine {self.endpoint} not reachable: {detail}", field="engine")
            raise DockerError(f"Docker engine not reachable ({detail}); {DOCKER_HOST_HELP}", field="engine")
        self.server_version = proc.stdout.strip()

    def run(self, *args: str, check: bool = True, timeout: Optional[float] = None) -> subprocess.CompletedProcess:
        """One docker command; `timeout` (seconds) bounds it on every engine kind, local included: past
        it the client is stopped and DockerTimeout is raised. An endpoint's own timeout bounds the rest."""
        extra = {}
        if self.endpoint is not None:  # never wait on a prompt (ssh) or a silent host for ever
            extra = {"stdin": subprocess.DEVNULL, "timeout": timeout or self.timeout, "start_new_session": True}
        elif timeout is not None or self.timeout is not None:  # a local engine given a bound (doctor's probes)
            extra = {"timeout": timeout or self.timeout}
        try:
            proc = procs.run([self.client, *args], "engine", env=self._env(), capture_output=True, text=True, **extra)
        except subprocess.TimeoutExpired:
            raise DockerTimeout(
                f"engine {self.name} did not answer `docker {args[0]}` within {timeout or self.timeout:.0f}s",
                field="engine",
            ) from None
        if check and proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            raise DockerError(f"docker {args[0]} failed: {detail}", field="engine")
        return proc

    def stream(
        self, *args: str, out: Optional[BinaryIO] = None, keep: int = 64 << 10, timeout: Optional[float] = None
    ) -> tuple[int, bytes, int]:
        """One docker command whose output (stdout and stderr, interleaved) is copied to `out` as it comes
        and never held whole: only its last `keep` bytes stay in memory. Returns (exit status, those last
        bytes, the byte count). `timeout` (else the client's own) bounds the whole command on every engine
        kind: past it the client's process group is killed and DockerTimeout raised."""
        limit = timeout or self.timeout
        proc = procs.popen(
            [self.client, *args],
            "engine",
            env=self._env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = None if limit is None else time.monotonic() + limit
            tail, total = procs.copy_tail(procs.chunks(proc.stdout, deadline), out, keep)
            code = proc.wait(timeout=None if deadline is None else max(0.1, deadline - time.monotonic()))
        except (TimeoutError, subprocess.TimeoutExpired):
            raise DockerTimeout(
                f"engine {self.name} did not answer `docker {args[0]}` within {limit:.0f}s", field="engine"
            ) from None
        finally:
            if proc.poll() is None:  # past the deadline, or `out` could not be written: the client goes too
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
                proc.wait()
            proc.stdout.close()
        return code, tail, total

    # -- facts about the engine

    def info(self) -> dict:
        if self._api is not None:
            return self._sdk("info", self._api.info)
        return json.loads(self.run("info", "--format", "{{json .}}").stdout)

    def image_id(self, ref: str) -> Optional[str]:
        if self._api is not None:
            try:
                return self._api.inspect_image(ref)["Id"]
            except sdk_errors.APIError as exc:
                if exc.is_client_error():  # no such image, or not a reference the engine takes: no id
                    return None
                raise DockerError(
                    f"docker image inspect failed: {_flat(exc.explanation or exc)}", field="engine"
                ) from None
            except (sdk_errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
                raise DockerError(
                    f"engine {self.name} did not answer `image inspect`: {_flat(exc)}", field="engine"
                ) from None
        proc = self.run("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def image_inspect(self, ref: str) -> dict:
        if self._api is not None:
            return self._sdk("image inspect", self._api.inspect_image, ref)
        return json.loads(self.run("image", "inspect", ref).stdout)[0]

    # -- building

    def build(self, req: BuildRequest, log_path: Path, echo: Optional[TextIO] = sys.stderr) -> str:
        """Build without tagging; stream plain progress to `echo` and the whole log to `log_path`."""
        iidfile = log_path.parent / "image-id.txt"
        with writing(iidfile, "the image id file"):
            iidfile.unlink(missing_ok=True)
        cmd = [
            self.client,
            "build",
            "--progress=plain",
            "--platform",
            req.platform,
            "--iidfile",
            str(iidfile),
            "-f",
            str(req.context / "Dockerfile"),
        ]
        for key, value in sorted(req.build_args.items()):
            cmd += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(req.labels.items()):
            cmd += ["--label", f"{key}={value}"]
        for sid, src in sorted(req.secrets.items()):
            cmd += ["--secret", f"id={sid},src={src}"]
        for ref in req.cache_from:
            cmd += ["--cache-from", ref]
        if req.inline_cache:  # a frontend option, not a Dockerfile ARG: it changes no step's cache key
            cmd += ["--build-arg", "BUILDKIT_INLINE_CACHE=1"]
        if req.network:
            cmd += ["--network", req.network]
        if req.no_cache:
            cmd.append("--no-cache")
        if req.target:
            cmd += ["--target", req.target]
        cmd.append(str(req.context))
        start = time.monotonic()
        tail: list[str] = []
        proc = None
        try:
            # no link followed, no FIFO opened: a planted build.log is one line, not a write elsewhere
            with writing(log_path, "the build log"), os.fdopen(open_host_file(log_path, "the build log"), "w") as log:
                log.write("$ " + " ".join(cmd) + "\n")
                for note in req.notes:
                    log.write(f"servebuild: {note}\n")
                    if echo is not None:
                        echo.write(f"[     0s] {note}\n")
                proc = procs.popen(
                    cmd,
                    "build",
                    env=self._env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    bufsize=1,
                )
                assert proc.stdout is not None
                for line in proc.stdout:
                    log.write(line)
                    tail = (tail + [line.rstrip()])[-80:]
                    if echo is not None and _is_progress(line):
                        echo.write(f"[{time.monotonic() - start:6.0f}s] {line}")
                        echo.flush()
                code = proc.wait()
        finally:
            if proc is not None and proc.poll() is None:  # the log could not be written: stop the build too
                proc.kill()
                proc.wait()
        if code != 0:
            raise DockerError(f"build failed (exit {code}): {failure_cause(tail)}; full log: {log_path}", field="build")
        return iidfile.read_text().strip()

    @contextmanager
    def saved(self, image_id: str) -> Iterator[tarfile.TarFile]:
        """`docker save IMAGE` as a tar stream, read once front to back (members in the engine's order:
        layers, then the config and manifest.json); an unreadable stream or a failed save is one line."""
        proc = procs.popen(
            [self.client, "save", image_id],
            "engine",
            env=self._env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        failed = None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|", bufsize=1 << 20) as tar:
                yield tar
        except tarfile.TarError as exc:
            failed = f"is not a readable archive ({exc})"
        finally:  # our end closed first: a save still writing ends on EPIPE instead of waiting for us
            proc.stdout.close()
            stderr = proc.stderr.read().decode(errors="replace")
            code = proc.wait()
        if code != 0:  # the engine's own words first: an unreadable stream is what a failed save leaves
            failed = f"failed: {(stderr.strip().splitlines() or [f'exit {code}'])[-1]}"
        if failed:
            raise DockerError(f"docker save of {image_id} on {self.name} {failed}", field="engine")

    def load(self, archive: bytes) -> str:
        """`docker load` of an archive held in memory (a config and its manifest); what the engine printed."""
        try:
            proc = procs.run(
                [self.client, "load"],
                "engine",
                env=self._env(),
                input=archive,
                capture_output=True,
                timeout=self.timeout or 600,
            )
        except subprocess.TimeoutExpired:
            raise DockerError(
                f"engine {self.name} did not answer `docker load` within {self.timeout or 600:.0f}s", field="engine"
            ) from None
        if proc.returncode != 0:
            raise DockerError(f"docker load failed on {self.name}: {procs.last_line(proc)}", field="engine")
        return proc.stdout.decode(errors="replace")

    def tag(self, image_id: str, tag: str) -> None:
        if self._api is None:
            self.run("tag", image_id, tag)
            return
        repository, _, name = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
        self._sdk("tag", self._api.tag, image_id, repository, name)

    def push(self, image_id: str, ref: str) -> None:
        """Tag `image_id` as `ref` and push it (a registry cache ref; not a published release)."""
        self.tag(image_id, ref)
        proc = procs.run(
            [self.client, "push", ref],
            "--cache-to",
            env=self._env(),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            raise DockerError(f"push of {ref} from {self.name} failed: {detail}", field="--cache-to")

    def remove_image(self, ref: str, force: bool = True) -> None:
        """Remove an image (or, force=False, only this name of it); absent already is fine."""
        if self._api is None:
            self.run("image", "rm", *(["-f"] if force else []), ref, check=False)
            return
        try:
            self._api.remove_image(ref, force=force)
        except (sdk_errors.DockerException, requests.exceptions.RequestException, OSError):
            pass  # absent, or in use by a container: what `rm -f` without check did

    def remove_container(self, name: str) -> None:
        if self._api is None:
            self.run("rm", "-f", "-v", name, check=False)
            return
        try:
            self._api.remove_container(name, v=True, force=True)
        except (sdk_errors.DockerException, requests.exceptions.RequestException, OSError):
            pass

    def run_in_image(
        self,
        image: str,
        *command: str,
        platform: Optional[str] = None,
        network: str = "none",
        entrypoint: Optional[str] = None,
    ) -> str:
        """The stdout of COMMAND in a throwaway container of `image`; a failure is one line with its stderr."""
        if self._api is not None:
            return self._run_in_image_api(image, list(command), platform, network, entrypoint)
        args = ["run", "--rm", "--network", network]
        if platform:
            args += ["--platform", platform]
        if entrypoint is not None:
            args += ["--entrypoint", entrypoint]
        return self.run(*args, image, *command).stdout

    def _run_in_image_api(
        self, image: str, command: list[str], platform: Optional[str], network: str, entrypoint: Optional[str]
    ) -> str:
        host_config = self._api.create_host_config(network_mode=network)
        created = self._sdk(
            "create",
            self._api.create_container,
            image,
            command=command,
            entrypoint=entrypoint,
            host_config=host_config,
            platform=platform,
        )
        container = created["Id"]
        try:
            self._sdk("start", self._api.start, container)
            status = self._sdk("wait", self._api.wait, container, timeout=int(self.timeout or 3600))
            out = self._sdk("logs", self._api.logs, container, stdout=True, stderr=False).decode(errors="replace")
            if status.get("StatusCode", 1) != 0:
                err = self._sdk("logs", self._api.logs, container, stdout=False, stderr=True).decode(errors="replace")
                detail = (err.strip().splitlines() or [f"exit {status.get('StatusCode')}"])[-1]
                raise DockerError(f"docker run failed: {detail}", field="engine")
            return out
        finally:
            self.remove_container(container)


# what a failed step printed that says why: pip, apt, compilers, the CA, our own checks
CAUSE = re.compile(
    r"(ERROR: (?!executor failed|failed to solve|process )|E: |error: |fatal: |Error: |"
    r"CERTIFICATE_VERIFY_FAILED|No matching distribution|THESE PACKAGES DO NOT MATCH|"
    r"Traceback|[A-Za-z]+Error: |No such file|not found|base image has Python)"
)
UNTRUSTED = re.compile(r"CERTIFICATE_VERIFY_FAILED\] certificate verify failed: ([^(']{1,120})")
STEP_PREFIX = re.compile(r"^#\d+ (\d+\.\d+ )?")
OURS = re.compile(
    r"^(?:#\d+ )?(?:\d+\.\d+ )?servebuild: (.+)"
)  # what servebuild's in-build checks print (tools/profile_check.py)
# a step's header echoes its command (which may quote our own messages): never a cause
STEP_HEADER = re.compile(r"^#\d+ \[[\w.-]+(?: \d+/\d+)?\] ")


def _flat(exc) -> str:
    return " ".join(str(exc).split())[:300]


def failure_cause(tail: list[str]) -> str:
    """The line of a failed build's output that says why (pip's, apt's or the compiler's own
    message), with BuildKit's step prefix dropped, and the failed step; else the last ERROR."""
    ours = next((m.group(1) for m in (OURS.match(t.strip()) for t in tail) if m), None)
    if ours:  # a check of servebuild's own that runs in the build says exactly what is wrong
        return ours[:1000]
    step = next((t for t in reversed(tail) if "executor failed running" in t or 'process "' in t), "")
    failed = next((m for m in (re.match(r"#(\d+) ERROR: ", t) for t in reversed(tail)) if m), None)
    # ^ the failed step's number: its own output says why (a concurrent step is only CANCELED)
    lines = [t for t in tail if t != step and not t.startswith("------") and not STEP_HEADER.match(t)]
    if failed and any(t.startswith(f"#{failed.group(1)} ") for t in lines):
        lines = [t for t in lines if t.startswith(f"#{failed.group(1)} ")]
    body = [STEP_PREFIX.sub("", t).strip() for t in lines]
    untrusted = next((m for m in (UNTRUSTED.search(b) for b in body) if m), None)
    if untrusted:  # pip's last words ("No matching distribution") hide it
        return (
            f"pip could not verify the package index's TLS certificate ({untrusted.group(1).strip()}): behind "
            "a TLS-intercepting proxy give the build its CA with --ca-bundle FILE or SERVEBUILD_CA_BUNDLE"
        )
    cause = next((b for b in reversed(body) if CAUSE.search(b) and "executor failed" not in b), None)
    if cause is None:
        return STEP_PREFIX.sub("", step or (tail[-1] if tail else "")).strip()
    where = re.search(r"running \[(.{0,80})", step)
    return f"{cause[:300]}" + (f" (in step: {where.group(1)}...)" if where else "")


def _is_progress(line: str) -> bool:
    """Step headers and errors always; step output too (plain progress lines start with #N)."""
    return line.startswith("#") or "ERROR" in line
