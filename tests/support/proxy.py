"""A TCP proxy a test can take down and bring back: a database outage as the worker sees it."""

from __future__ import annotations

import contextlib
import socket
import threading


class PausableProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; :meth:`pause` closes the listener and every
    forwarded connection (new connections are refused), :meth:`resume` listens again."""

    def __init__(self, target: tuple[str, int], port: int) -> None:
        self.target = target
        self.port = port
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def resume(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        listener.settimeout(0.2)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def pause(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
