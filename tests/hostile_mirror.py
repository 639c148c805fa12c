"""A hostile Debian mirror on 127.0.0.1, written for the tests: no real mirror misbehaves on demand. Every
request (any path) is recorded and answered the way `mode` says:

silent      the connection is accepted and never answered
trickle     a 200 status line and headers (Content-Length 1 MiB), then the body one byte every 0.3 s
not-http    an answer that is not HTTP (an SSH banner), then the connection closed
reset       the connection closed at once, nothing sent (a reset: the one case that is asked again)
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        self.request.settimeout(5)
        try:
            head = self.request.recv(65536).decode(errors="replace")
        except OSError:
            return
        server.requests.append(head.split("\r\n", 1)[0])
        mode = server.mode
        try:
            if mode == "silent":
                server.stopped.wait(600)
            elif mode == "trickle":
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nContent-Type: x\r\n\r\n")
                while not server.stopped.wait(0.3):
                    self.request.sendall(b"x")
            elif mode == "not-http":
                self.request.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
            elif mode == "reset":
                self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class HostileMirror:
    def __init__(self, mode: str):
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.mode = mode
        self.server.requests = []
        self.server.stopped = threading.Event()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.url = f"http://{self.address}/debian"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def requests(self) -> list[str]:
        return list(self.server.requests)

    def stop(self) -> None:
        self.server.stopped.set()
        self.server.shutdown()
        self.server.server_close()
        time.sleep(0.05)
