"""The echo engine's backend: the third engine, in the tests' folder, reached through the registry.

Everything the core needs from an engine and nothing more: its flags (`port`, `greeting`), the
launch argv, its log grammar (echo_server.py's `ECHO|time|what` records) read into core events,
its readiness path: the required groups (`flags`, `launch`, `logs`). It has no advice, memory plan,
tuner or metrics: those groups are None, and nothing here stands in for them. Its groups are plain
classes: nothing of cockpit.backends.engine is needed to join.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from cockpit.backends.base import CONTINUATION, EngineWords, FlagError, LogParser
from cockpit.core import events as ev
from cockpit.core.findings import FlagChange
from cockpit.core.linesplit import ByteReader, Lines
from cockpit.core.reducer import apply
from cockpit.core.state import RunState

if TYPE_CHECKING:
    from cockpit.core.profile import Profile

NAME = "echo"
VERSION = "1"
SERVER = str(Path(__file__).resolve().parent / "echo_server.py")
FLAGS = {"port": int, "greeting": str}  # the engine's whole flag table
_RECORD = re.compile(r"ECHO\|(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\|(?P<what>.*)")


class EchoParser:
    """`ECHO|time|what` records → core events; anything else is not this engine's."""

    def __init__(self) -> None:
        self._lines = 0

    @property
    def lines_seen(self) -> int:
        return self._lines

    def feed(self, lines: Lines) -> list[ev.Event]:
        """Whole, numbered lines from the core's one splitter: no partial line is kept here."""
        self._lines = max(self._lines, lines.first - 1)
        return [e for line in lines.raw_lines() for e in self._line(line)]

    def finish(self) -> list[ev.Event]:
        return []  # no record spans lines: nothing is held back

    def skip_lines(self, n: int) -> None:
        self._lines += n

    def _line(self, raw: bytes) -> list[ev.Event]:
        self._lines += 1
        m = _RECORD.fullmatch(raw.decode("utf-8", "replace").rstrip("\r"))
        if m is None:
            return []
        ts, what, n = m["ts"], m["what"], self._lines
        if what.startswith("args "):
            return [ev.ServerArgs(line=n, ts=ts, rank=None, args=json.loads(what[5:]), form="dict")]
        if what.startswith("listening on "):
            return [ev.ServerReady(line=n, ts=ts, rank=None)]
        if what.startswith("PANIC "):
            return [ev.RankDead(line=n, ts=ts, rank=None, rank_index=None, exit_code=None, how="dead", text=what)]
        return []


def _effective(profile: Profile, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for key, value in {**profile.server, **(overrides or {})}.items():
        dest = key.replace("-", "_")
        if dest not in FLAGS:
            raise FlagError(f"--{key}", f"echo_server: error: unrecognized arguments: --{key}")
        try:
            flags[dest] = FLAGS[dest](value)
        except ValueError:
            raise FlagError(f"--{key}", f"echo_server: error: argument --{key}: invalid value {value!r}") from None
    return flags


class EchoFlags:
    def effective(self, profile: Profile, overrides: Mapping[str, Any] | None = None, *,
                  version: str | None = None) -> dict[str, Any]:
        return _effective(profile, overrides)

    def parse_overrides(self, items: Iterable[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise FlagError(item, f"--set {item!r}: write FLAG=VALUE, e.g. greeting=hi")
            out[key] = value
        return out

    def diff(self, profile: Profile, flags: Mapping[str, Any]) -> list[FlagChange]:
        mine = _effective(profile)
        given = {k.lstrip("-").replace("-", "_"): v for k, v in flags.items()}
        return [FlagChange(f"--{dest}", mine.get(dest), given.get(dest)) for dest in sorted({*mine, *given})
                if mine.get(dest) != given.get(dest)]

    def value(self, flags: Mapping[str, Any], flag: str, default: Any = None) -> Any:
        return flags.get(flag.lstrip("-").replace("-", "_"), default)


class EchoLaunch:
    def argv(self, profile: Profile, overrides: Mapping[str, Any] | None = None, *,
             version: str | None = None) -> list[str]:
        argv = list(profile.program or [sys.executable, SERVER])
        for dest, value in _effective(profile, overrides).items():
            argv += [f"--{dest}", str(value)]
        return argv

    def node_argvs(self, profile: Profile, overrides: Mapping[str, Any] | None = None,
                   dist_init_addr: str | None = None) -> list[list[str]]:
        if len(profile.hosts) != 1:
            raise FlagError("hosts", "the echo engine runs on one host")
        return [self.argv(profile, overrides)]

    def secret_env(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
        return {}

    def rendezvous_addr(self, flags: Mapping[str, Any]) -> str | None:
        return None

    def node_env(self, profile: Profile, index: int) -> dict[str, str]:
        return {}  # one node only: nothing to tell a node about its address

    def debug_settings(self) -> tuple[dict[str, str], dict[str, Any]]:
        return {}, {}

    # GPUs: the echo engine uses none
    def rank_gpus(self, ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any],
                  env: Mapping[str, str]) -> dict[str, tuple[str, int]]:
        return {}

    def gpus(self, hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]) -> set[tuple[str, int]]:
        return set()

    def process_role(self, name: str, is_server: bool) -> tuple[str, str | None]:
        return ("server" if is_server else "other"), None

    def api_port(self, flags: Mapping[str, Any]) -> int:
        return int(flags.get("port", 8080))

    def readiness_path(self, version: str | None) -> str:
        return "/alive"

    def pd_role(self, flags: Mapping[str, Any]) -> str | None:
        return None

    def role_hint(self, role: str) -> str:
        return "the echo engine serves no prefill/decode role"

    def router_argv(self, profile: Profile) -> list[str]:
        raise FlagError("router", "the echo engine has no router")


class EchoLogs:
    def new_parser(self) -> LogParser:
        return EchoParser()

    def new_state(self) -> RunState:
        return RunState(backend=NAME, format=f"{NAME}-{VERSION}")

    def read(self, source: str | Path | BinaryIO, state: RunState | None = None,
             stats: dict[str, int] | None = None) -> RunState:
        state = state or self.new_state()
        parser = ByteReader(EchoParser())
        data = Path(source).read_bytes() if isinstance(source, (str, Path)) else source.read()
        events = [*parser.feed(data), *parser.finish()]
        for e in events:
            apply(state, e)
        if stats is not None:
            stats.update(lines=parser.lines_seen, recognised=len(events), foreign=0)
        return state

    def score(self, sample: bytes) -> float:
        lines = [line for line in sample.splitlines() if line.strip()]
        return sum(line.startswith(b"ECHO|") for line in lines) / len(lines) if lines else 0.0

    def record_rank(self, line: str) -> str | None:
        return "" if line.startswith("ECHO|") else CONTINUATION

    def is_server_args(self, event: Any) -> bool:
        return isinstance(event, ev.ServerArgs)

    def filter_presets(self) -> Mapping[str, tuple[str, ...]]:
        return {"errors": ("PANIC",)}


class EchoBackend:
    name = NAME

    def __init__(self) -> None:
        self.flags = EchoFlags()
        self.launch = EchoLaunch()
        self.logs = EchoLogs()
        # the optional capabilities it lacks (base.OPTIONAL): each caller says what it cannot do
        self.doctor = None
        self.planner = None
        self.tuner = None
        self.metrics = None

    def words(self) -> EngineWords:
        return EngineWords(display="Echo", flag_labels={"greeting": "greet"}, default_port=8080)

    def versions(self) -> tuple[str, ...]:
        return (VERSION,)

    def resolve_version(self, version: str | None) -> str:
        return version or VERSION

    def run_version(self, state: RunState, profile: Profile | None = None) -> str | None:
        return (profile.version if profile else None) or VERSION
