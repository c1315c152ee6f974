"""A TCP relay in front of one real server: a slow link that the test steers. Every
connection is forwarded byte for byte, except that the relay can hold back one request (the
first client chunk that contains given words) until the test delivers it: the client gets no
answer in time and gives up, and the server runs the request later, after requests sent
since on other connections. That is the order a paused or slow master can give requests it
was sent on several connections; here it is the same on every run."""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable, List, Optional, Sequence

from servers import free_port

HOLD_BOUND = 30.0
"""Seconds a held request waits for :meth:`Relay.deliver` at most (then it goes on)."""


class Relay:
    """Listens on 127.0.0.1 (:attr:`port`) and forwards each connection to ``target_port``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = []
        self._closed = False
        self._hold_words: Optional[Sequence[bytes]] = None
        self._count_words: Sequence[bytes] = ()
        self._release = threading.Event()
        self.held = threading.Event()
        """Set once a request was held back."""
        self.answered = threading.Event()
        """Set once the server answered the held request, after its delivery."""
        self.counted_after_hold = 0
        """Requests with the counted words forwarded while one was held back."""
        threading.Thread(target=self._accept, name=f"relay-{self.port}", daemon=True).start()

    def hold(self, words: Sequence[bytes], *, count: Sequence[bytes] = ()) -> None:
        """Holds back the next client chunk that contains every one of ``words``; while it
        is held, counts the forwarded chunks that contain every one of ``count``."""
        with self._lock:
            self._hold_words = tuple(words)
            self._count_words = tuple(count)

    def deliver(self) -> None:
        """Sends the held request on to the server (on its own connection, even if the
        client closed it since)."""
        self._release.set()

    def close(self) -> None:
        self._release.set()
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
        self._listener.close()
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass

    # -- forwarding ----------------------------------------------------------------------

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._sockets.append(sock)
            return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            if not (self._track(client) and self._track(server)):
                client.close()
                server.close()
                return
            state = _Link()
            threading.Thread(target=self._upstream, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, state), daemon=True).start()

    def _takes(self, chunk: bytes) -> bool:
        """Whether ``chunk`` is the one to hold back (one only)."""
        with self._lock:
            words = self._hold_words
            if words is None or self.held.is_set() or not all(w in chunk for w in words):
                return False
            self.held.set()
            return True

    def _count(self, chunk: bytes) -> None:
        with self._lock:
            if self.held.is_set() and self._count_words and all(w in chunk for w in self._count_words):
                self.counted_after_hold += 1

    def _upstream(self, client: socket.socket, server: socket.socket, state: _Link) -> None:
        try:
            while True:
                chunk = client.recv(65536)
                if not chunk:
                    server.shutdown(socket.SHUT_WR)  # the server runs what it has, then closes
                    return
                if self._takes(chunk):
                    self._release.wait(HOLD_BOUND)
                    state.delivered = True
                else:
                    self._count(chunk)
                server.sendall(chunk)
        except OSError:
            return

    def _downstream(self, server: socket.socket, client: socket.socket, state: _Link) -> None:
        try:
            while True:
                chunk = server.recv(65536)
                if not chunk:
                    break
                if state.delivered:
                    self.answered.set()
                try:
                    client.sendall(chunk)
                except OSError:
                    pass  # the client gave up on this connection; the server goes on
        except OSError:
            pass
        finally:
            for sock in (client, server):
                try:
                    sock.close()
                except OSError:
                    pass


class _Link:
    """One relayed connection's state."""

    def __init__(self) -> None:
        self.delivered = False


def wait_until(done: Callable[[], bool], timeout: float, step: float = 0.005) -> bool:
    """Polls ``done`` until it is true or ``timeout`` seconds passed; whether it came true."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True

