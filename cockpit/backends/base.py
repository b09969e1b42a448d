"""The backend interface: everything that is specific to one inference server.

The core, the supervisor and the UI only talk to a `Backend`. SGLang implements it first; vLLM
fits the same shape (a flag table per version, a command builder, a log parser that yields the
same core events, a memory model that answers "what flag change buys F GiB of headroom").
Nothing here imports textual, asyncssh or httpx.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cockpit.core.findings import Finding
from cockpit.core.state import RunState

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from cockpit.core.profile import Profile


class FlagError(ValueError):
    """A server flag was unknown, ambiguous or had a value of the wrong type.

    `message` reads like the server's own argparse error where the server would refuse it too.
    """

    def __init__(self, flag: str, message: str):
        self.flag = flag
        super().__init__(message)


@dataclass(frozen=True)
class HostFacts:
    """What preflight knows about one node (None = unknown, never 0)."""

    host: str
    mem_total_gb: float | None = None  # decimal GB
    mem_available_gb: float | None = None  # min(MemAvailable, cgroup headroom), decimal GB
    gpu_count: int | None = None
    gpu_mem_total_gib: float | None = None  # smallest GPU's total, GiB
    gpu_free_gib: tuple[float | None, ...] = ()
    source: str = "unknown"  # "psutil", "agent", "override"


class LogParser(Protocol):
    """Turns log text into events applied to a RunState. Stateful across feeds (continuations)."""

    def feed(self, data: bytes) -> Iterator[Any]:
        """Feed raw bytes (any chunking, may split lines); yield events for complete lines."""
        ...

    def finish(self) -> Iterator[Any]:
        """Flush a trailing partial line at end of input."""
        ...


class Backend(Protocol):
    name: str  # "sglang"

    def versions(self) -> tuple[str, ...]: ...

    def build_argv(
        self, profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None
    ) -> list[str]:
        """The argv that starts the server (never a shell string). Raises FlagError."""
        ...

    def new_parser(self) -> LogParser: ...

    def new_state(self) -> RunState: ...

    def diagnose(
        self, state: RunState, profile: Profile | None = None, hosts: Iterable[HostFacts] = ()
    ) -> list[Finding]: ...

    def preflight(self, profile: Profile, hosts: Iterable[HostFacts]) -> list[Finding]: ...
