"""Faults between the real node and its real S3 server: a source that never answers, and a gate that lets a set
number of response bytes through and then holds every connection until it is opened.

Both listen on the node's address, so a pod on the real node reaches them as it reaches versitygw; the gate relays to
versitygw itself, so what passes it is the real server's bytes.
"""

from __future__ import annotations

import socket
import threading


class Hanging:
    """A TCP server on the node's address that accepts connections and never answers: a tenant's slow source."""

    def __init__(self, host: str) -> None:
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.held.append(connection)

    def close(self) -> None:
        self.server.close()
        for connection in self.held:
            connection.close()


class Gate:
    """A TCP relay to ``upstream`` that passes requests freely and at most ``budget`` response bytes in all, then holds
    every connection (new ones too) until `open()`: a download that is certain to be mid-way when a test acts."""

    def __init__(self, host: str, upstream: tuple[str, int], budget: int) -> None:
        self.upstream = upstream
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self._left = budget
        self._lock = threading.Lock()
        self._opened = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def open(self) -> None:
        """Let every held and later byte through."""
        self._opened.set()

    def close(self) -> None:
        self._opened.set()
        self.server.close()
        for held in self._sockets:
            try:
                held.close()
            except OSError:
                pass

    def _serve(self) -> None:
        while True:
            try:
                downstream, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                downstream.close()
                continue
            self._sockets += [downstream, upstream]
            threading.Thread(target=self._pipe, args=(downstream, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, downstream, True), daemon=True).start()

    def _allowance(self, wanted: int) -> int:
        """How many of `wanted` response bytes may pass now; waits while the budget is spent and the gate shut."""
        while not self._opened.is_set():
            with self._lock:
                if self._left > 0:
                    granted = min(wanted, self._left)
                    self._left -= granted
                    return granted
            self._opened.wait(0.5)
        return wanted

    def _pipe(self, source: socket.socket, sink: socket.socket, metered: bool) -> None:
        try:
            while data := source.recv(256 * 1024):
                while data:
                    size = self._allowance(len(data)) if metered else len(data)
                    sink.sendall(data[:size])
                    data = data[size:]
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
