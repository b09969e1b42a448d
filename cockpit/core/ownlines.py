"""Cockpit's own requests to a server, and the lines they leave in its log.

Every request Cockpit sends to an engine (readiness, /metrics, the hang probe, /v1/models) carries
a fixed User-Agent and a marker query string the engines ignore (`?by=cockpit`: FastAPI drops
unknown query parameters, prometheus_client reads only `name[]`). uvicorn's access log (SGLang's and
vLLM's) prints the path with its query string and not the User-Agent:

    INFO:     127.0.0.1:52576 - "GET /metrics?by=cockpit HTTP/1.1" 200 OK

so the marker is what tells Cockpit's lines from anyone else's. They are not the server's news: the
log reader (cockpit/supervisor/nodelog.py, shared by the TUI and `cockpit logs`) drops them, counts
them, and keeps the file's line numbers. A request without the marker (a load balancer's health
check, a Prometheus scraper) is never hidden.
"""

from __future__ import annotations

OWN_QUERY = "by=cockpit"
USER_AGENT = "cockpit-monitor (+own request; see Cockpit's docs/OPERATIONS.md, Footprint)"
HEADERS = {"User-Agent": USER_AGENT}
# the marker as the access line shows it: the end of the request target, before the protocol
_OWN_MARK = f"?{OWN_QUERY} HTTP/"


def own_path(path: str) -> str:
    """`path` with Cockpit's marker query string (a path that has a query keeps it)."""
    return f"{path}&{OWN_QUERY}" if "?" in path else f"{path}?{OWN_QUERY}"


def is_own_line(text: str) -> bool:
    """The access line of one of Cockpit's own requests (a substring check: runs on every line)."""
    return _OWN_MARK in text or (f"&{OWN_QUERY} HTTP/" in text)
