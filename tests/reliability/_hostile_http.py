"""A hostile HTTP "server" for the probe tests: a real process on a loopback port that answers
every GET according to its path and never ends an answer of its own accord.

usage: python _hostile_http.py PORT_FILE

Paths (a base URL ending in /slow or /loris puts every path under that pacing):
  /slow/…              200, then one body byte every 0.5 s, forever
  /loris/…             the status line one byte a second, headers never finished
  /health, /ready      200, then a body streamed forever (64 KiB chunks, as fast as it is read)
  /server_info         200 with an endless JSON string: {"version": "xxxx…
  /metrics             200 with endless Prometheus lines
  anything else        404 with an endless error body

It binds 127.0.0.1:0, writes the port to PORT_FILE, serves each connection on its own thread,
and exits when its parent (the test) is gone.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

CHUNK = b"x" * 65536


def _send_forever(conn: socket.socket, head: bytes, piece: bytes) -> None:
    conn.sendall(head)
    while True:
        conn.sendall(piece)


def _serve(conn: socket.socket) -> None:
    try:
        req = b""
        while b"\r\n\r\n" not in req:
            data = conn.recv(4096)
            if not data:
                return
            req += data
        # a query string is not the path (Cockpit marks its requests `?by=cockpit`; engines ignore it)
        path = req.split(b" ", 2)[1].decode("latin-1").split("?", 1)[0]
        ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
        if path.startswith("/slow/"):
            conn.sendall(ok)
            while True:
                conn.sendall(b"x")
                time.sleep(0.5)
        elif path.startswith("/loris/"):
            for ch in b"HTTP/1.1 200 OK\r\n":
                conn.sendall(bytes([ch]))
                time.sleep(1.0)
            while True:
                conn.sendall(b"X")
                time.sleep(1.0)
        elif path.endswith(("/health", "/ready")):
            _send_forever(conn, ok, CHUNK)
        elif path.endswith(("/server_info", "/get_server_info")):
            _send_forever(conn, ok.replace(b"text/plain", b"application/json") + b'{"version": "', CHUNK)
        elif path.endswith("/metrics"):
            line = b'sglang:num_running_reqs{tp_rank="0"} 1.0\n' * 1500
            _send_forever(conn, ok + b"# TYPE sglang:num_running_reqs gauge\n", line)
        else:
            _send_forever(conn, b"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n", CHUNK)
    except OSError:
        pass
    finally:
        conn.close()


def announce(port: int, port_file: str) -> None:
    """Write the port for the test (atomically) and end this process when its parent goes."""
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, port_file)
    parent = os.getppid()

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()


def main() -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    announce(srv.getsockname()[1], sys.argv[1])
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
