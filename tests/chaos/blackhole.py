"""A TCP proxy that can go silent: packets dropped on open connections, never a reset.

`Blackhole(upstream_port)` listens on a free port of 127.0.0.1 and forwards every connection to
127.0.0.1:upstream_port, one thread per direction. `silence()` stops forwarding in both directions
while every socket stays open (no FIN, no RST): what a client sees when a firewall, a NAT table or
a dead link drops its packets. Nothing read meanwhile is lost: it is held and forwarded after
`heal()`, as TCP's retransmissions would deliver it once the path is back. A connection opened
during the silence is accepted (the SYN of a real silent path would go unanswered instead; either
way nothing answers) and joined to the server after `heal()`.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

from support import free_port

__all__ = ["Blackhole"]


class Blackhole:
    """An in-process proxy to 127.0.0.1:`upstream_port` with a silence switch (see the module doc)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self._open = threading.Event()  # set: forwarding; clear: silent
        self._open.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        threading.Thread(target=self._accept, name="blackhole-accept", daemon=True).start()

    def silence(self) -> None:
        """Stop forwarding in both directions; every connection stays open."""
        self._open.clear()

    def heal(self) -> None:
        """Forward again (what was held goes through first)."""
        self._open.set()

    def close(self) -> None:
        """Close the listener and every connection."""
        self._closed.set()
        self._open.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._join, args=(client,), daemon=True).start()

    def _join(self, client: socket.socket) -> None:
        self._track(client)
        if not self._wait_open():
            return
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        self._track(server)
        threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
        self._pump(server, client)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _wait_open(self) -> bool:
        while not self._open.wait(0.1):
            if self._closed.is_set():
                return False
        return not self._closed.is_set()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while self._wait_open():
                readable, _, _ = select.select([source], [], [], 0.1)
                if not readable or not self._open.is_set():
                    continue  # silent: leave the bytes in the kernel's buffer, unread and unanswered
                data = source.recv(65536)
                if not data:
                    break
                if not self._wait_open():
                    return
                target.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)
