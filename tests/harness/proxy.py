"""A tiny TCP proxy on 127.0.0.1 used to cut a client off from the server
(e.g. to let a kazoo session expire while the client keeps retrying), and by
KeelCluster(proxied=True) as one proxy per directed peer link (partitions).
Python 3 standard library only."""

import socket
import threading

from .servers import free_port


class TcpProxy:
    def __init__(self, target_port, target_host="127.0.0.1"):
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lsock = None
        self._conns = []
        self._lock = threading.Lock()
        self._accept_thread = None

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    @property
    def listening(self):
        return self._lsock is not None

    def start(self):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(16)
        self._lsock = ls
        self._accept_thread = threading.Thread(target=self._accept_loop, args=(ls,), daemon=True)
        self._accept_thread.start()
        return self

    def _accept_loop(self, ls):
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target, timeout=5)
                s.settimeout(None)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._conns += [c, s]
            for a, b in ((c, s), (s, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        """Stop listening and drop every proxied connection (clients then get
        'connection refused' until resume())."""
        if self._lsock:
            try:
                self._lsock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            except OSError:
                pass
            self._lsock.close()
            self._lsock = None
        if self._accept_thread:
            self._accept_thread.join(5)
            self._accept_thread = None
        with self._lock:
            conns, self._conns = self._conns, []
        for x in conns:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def resume(self):
        return self.start()

    def close(self):
        self.cut()
