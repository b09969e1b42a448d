"""What both engines' HTTP servers look like on the wire: uvicorn's (SGLang and vLLM both serve
through it). Each simulator's handler subclasses `UvicornHandler` and writes its own access line."""

from __future__ import annotations

import contextlib
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any


class UvicornHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        # as uvicorn: no Nagle delay on small writes (a streamed token would wait ~40 ms for an ACK)
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def status_text(code: int | str) -> str:
    """`200 OK` as uvicorn's access log writes a status; an unknown code as given."""
    try:
        status = HTTPStatus(int(code))
        return f"{status.value} {status.phrase}"
    except (ValueError, TypeError):
        return str(code)
