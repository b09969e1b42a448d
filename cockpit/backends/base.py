"""The backend interface: everything that is specific to one inference server.

The supervisor, the commands and the UI talk to an engine only through a `Backend`, obtained with
`cockpit.backends.get_backend(profile.backend)`. SGLang implements it first (`cockpit/backends/<engine>/`);
a second engine adds a package of its own that implements the same methods (see the "Adding an
engine" section of docs/ARCHITECTURE.md) and one line in `get_backend`.

What crosses the interface is the core's vocabulary only: `Profile`, `RunState`, core events,
`Finding`/`FlagChange`, `HostFacts`, rank labels ("DP1 TP3") and plain dicts of flag values keyed
by the profile's spelling. Nothing here imports textual, asyncssh or httpx, and implementations
must not either (`lint-imports` enforces it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, runtime_checkable

from cockpit.core.findings import Finding, FlagChange
from cockpit.core.linesplit import Lines
from cockpit.core.state import RunState
from cockpit.errors import BadInput

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from pathlib import Path

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
    gpu_name: str | None = None  # the smallest GPU's name as the driver reports it ("NVIDIA A100-SXM4-80GB")


@dataclass(frozen=True)
class EngineWords:
    """What the UI and the CLI say about one engine, in the engine's own words (issue 26: the core,
    the UI and the CLI name concepts; the backend names its flags). Cheap: no table is built."""

    display: str  # the engine as its own docs spell it: "SGLang"
    memory_flag: str | None = None  # the memory setting's flag (dest): what `RunState.memory_setting` reads
    flag_labels: Mapping[str, str] = field(default_factory=dict)  # "mem-fraction-static" -> "mfs" (tight columns)
    default_port: int | None = None  # the HTTP port when the flags name none
    demo_profile: str | None = None  # the bundled profile `cockpit demo --backend NAME` opens
    # rank label prefix -> the flags (profile spelling) that size that axis: TP0…, DP0…, PP0…
    rank_axes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    native_api: str | None = None  # the engine's own generate API (`bench --api NAME`), beside OpenAI's
    # the flags (profile spelling) its tuning policy moves, in the order a tuning step names them
    tuned_flags: tuple[str, ...] = ()
    # the host cache (KV pages kept in host RAM): its name in the engine's docs ("HiCache"), the flag
    # that turns it on and the flag of its size in GB per rank; None: this engine has none Cockpit reads
    host_cache_label: str | None = None
    host_cache_flags: tuple[str, str] | None = None
    # crash kind -> its label, for the kinds named in this engine's words (DESIGN.md's JSON values)
    crash_labels: Mapping[str, str] = field(default_factory=dict)
    # a predicted effect's key (Finding.predicted, this engine's) -> its words with the unit ("{:g}")
    predicted_words: Mapping[str, str] = field(default_factory=dict)
    metrics_switch: str | None = None  # the flag that turns /metrics on (None: always served)


class GenerateApi(Protocol):
    """An engine's own streaming generate endpoint, beside OpenAI's /v1/completions (`bench --api
    NAME`, NAME = `EngineWords.native_api`): where to POST, the body, and the output-token count an
    event of its stream states. The load generator does the HTTP, the timing and the checks."""

    path: str  # "/generate"

    def body(self, text: str | None, token_ids: list[int] | None, output_len: int) -> dict[str, Any]:
        """A streaming request for `output_len` tokens, EOS ignored, greedy: the prompt as text or ids."""
        ...

    def output_tokens(self, event: Mapping[str, Any]) -> Any:
        """The output-token count one streamed event (or a whole answer) states, as sent (the caller
        checks it is a plausible int); None when the event says nothing."""
        ...


class LogParser(Protocol):
    """Turns a log's lines into core events. It is handed whole, numbered lines by the one splitter
    (cockpit/core/linesplit.py: `LineSplitter`, or `ByteReader` for a file read whole) and keeps no
    partial line of its own; what it carries across feeds is its reading (records, tracebacks)."""

    @property
    def lines_seen(self) -> int:
        """Complete lines consumed so far (the file's line numbering, skipped lines included)."""
        ...

    def feed(self, lines: Lines) -> Iterable[Any]:
        """The events of these whole lines (numbered from `lines.first`)."""
        ...

    def finish(self) -> Iterable[Any]:
        """The events held back until the end of the input (a record still open, a last sample)."""
        ...

    def skip_lines(self, n: int) -> None:
        """n lines went by unread (a huge log's middle): keep line numbers those of the file."""
        ...


# `Backend.logs.record_rank` answers this for a line that continues the previous record (a traceback
# line, a wrapped repr): it belongs to that record's rank.
CONTINUATION: Any = None


class BackendFlags(Protocol):
    """`backend.flags`: the server's flags as the profile, `--set` and a launched run give them."""

    def effective(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> dict[str, Any]:
        """Server flags of the profile with the overrides applied: the server's own key (dest) →
        typed value. Raises FlagError naming the profile file and key for a flag the server refuses."""
        ...

    def parse_overrides(self, items: Iterable[str]) -> dict[str, Any]:
        """`--set` items (`mem-fraction-static=0.88`, `enable-metrics`) → {flag: typed value}.
        Raises FlagError for an item that is not FLAG[=VALUE]."""
        ...

    def diff(self, profile: Profile, flags: Mapping[str, Any]) -> list[FlagChange]:
        """What differs between the profile's server flags and `flags` (a run's, as launched)."""
        ...

    def value(self, flags: Mapping[str, Any], flag: str, default: Any = None) -> Any:
        """The value of one flag in `flags` (any spelling the server accepts, aliases included)."""
        ...


class BackendLaunch(Protocol):
    """`backend.launch`: what starts a run and where it lands — argv, environment, rendezvous, the
    GPUs it takes, its processes, the port and endpoint that say it serves, the P/D router."""

    def argv(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> list[str]:
        """The argv that starts a one-node server (never a shell string). Raises FlagError."""
        ...

    def node_argvs(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, dist_init_addr: str | None = None
    ) -> list[list[str]]:
        """One argv per host of the profile (one for a one-node profile); a multi-node run gets
        its node rank, node count and rendezvous address (`dist_init_addr`, else the profile's own;
        FlagError when neither is there). A secret flag the engine also reads from its environment
        is left out: `secret_env` carries it. Raises FlagError."""
        ...

    def secret_env(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
        """{variable: value} for the launch's environment: the secret flags `node_argvs` left
        out of argv (vLLM's `--api-key` as VLLM_API_KEY), so no other user's `ps` shows them; {}
        when none is set."""
        ...

    def rendezvous_addr(self, flags: Mapping[str, Any]) -> str | None:
        """The multi-node rendezvous address the flags set themselves (None: the supervisor picks
        a free port on node 0)."""
        ...

    def node_env(self, profile: Profile, index: int) -> dict[str, str]:
        """{variable: value} node `index` of a multi-node run adds to its environment (the engine's
        way of being told the node's own address, when the profile names one); {} when its flags
        tell it all."""
        ...

    def debug_settings(self) -> tuple[dict[str, str], dict[str, Any]]:
        """(environment, server flags) a debug relaunch adds (NCCL/PyTorch debugging, the engine's
        own); ({}, {}) for an engine with no debug settings."""
        ...

    def rank_gpus(
        self, ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> dict[str, tuple[str, int]]:
        """Rank label → (host, GPU index) for the ranks a log showed; {} for an engine that uses no GPU."""
        ...

    def gpus(self, hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]) -> set[tuple[str, int]]:
        """(host, GPU index) pairs a run with these flags will use (before its log names a rank);
        set() for an engine that uses no GPU."""
        ...

    def process_role(self, name: str, is_server: bool) -> tuple[str, str | None]:
        """(role, rank) of a run's process by the title the engine gave it ("VLLM::Worker_TP1")."""
        ...

    def api_port(self, flags: Mapping[str, Any]) -> int:
        """The HTTP port node 0 serves on with these flags."""
        ...

    def readiness_path(self, version: str | None) -> str:
        """The endpoint that answers 200 once the server serves ("/health", "/ready")."""
        ...

    def pd_role(self, flags: Mapping[str, Any]) -> str | None:
        """The prefill/decode role these server flags give (SGLang `disaggregation-mode`, vLLM
        `kv-transfer-config` kv_role): "prefill", "decode", "prefill+decode", or None (no role)."""
        ...

    def role_hint(self, role: str) -> str:
        """How this engine's flags give a server the prefill/decode `role` (a refused group's hint)."""
        ...

    def router_argv(self, profile: Profile) -> list[str]:
        """The router of a prefill/decode profile (`groups:` + `router:`) as an argv: the engine's
        own router over the groups' first hosts and API ports, or `router.program`. Raises
        FlagError when the engine has no router of its own and the profile names none."""
        ...


class BackendLogs(Protocol):
    """`backend.logs`: the server's log read into core events and states, and shown line by line."""

    def new_parser(self) -> LogParser:
        """A parser for one node's log of one run."""
        ...

    def new_state(self) -> RunState:
        """An empty state of a run of this engine (its memory setting's flag named)."""
        ...

    def read(self, source: str | Path | BinaryIO, state: RunState | None = None,
             stats: dict[str, int] | None = None) -> RunState:
        """A whole log file (or binary stream) read into a state (continuing `state` when given).
        `stats` (the caller's dict) gets this input's `lines`, `recognised` (lines read as this
        server's log) and `foreign` (lines of another engine's log) counts."""
        ...

    def score(self, sample: bytes) -> float:
        """0..1: the share of a log's opening bytes that read as this server's records
        (`cockpit diagnose` reads a log with the backend that scores highest)."""
        ...

    def record_rank(self, line: str) -> str | None:
        """The rank label of a log record that starts on `line`: "DP1 TP3"; "" for a record
        without a rank (the main process); CONTINUATION (None) when the line continues the
        previous record. `line` is display text (ANSI stripped). Called for every line shown."""
        ...

    def is_server_args(self, event: Any) -> bool:
        """The event is the server's dump of its arguments, which every node of a multi-node run
        logs once (the supervisor keeps node 0's instead of reading the second as a new run)."""
        ...

    def filter_presets(self) -> Mapping[str, tuple[str, ...]]:
        """The log view's presets ("memory", "errors", "batches") as substrings this server prints;
        cockpit.core.logfilter.LineFilter matches them (the TUI's f/m/e/b keys, `logs --filter`)."""
        ...


class BackendDoctor(Protocol):
    """`backend.doctor`: findings — before a launch (preflight) and about a run (diagnose)."""

    def diagnose(
        self,
        state: RunState,
        profile: Profile | None = None,
        hosts: Iterable[HostFacts] = (),
        *,
        target_headroom_gb: float | None = None,
    ) -> list[Finding]:
        """Findings about a run (what went wrong, which flag change fixes it), most severe first."""
        ...

    def preflight(
        self, profile: Profile, hosts: Iterable[HostFacts], *, version: str | None = None
    ) -> list[Finding]:
        """Findings about a profile before it launches, from the flags and the hosts' facts."""
        ...

    def after_plan(self, profile: Profile, plan: Any) -> list[Finding]:
        """Findings that need the memory plan (`plan`, cockpit.model.plan.MemoryPlan): the gate asks
        once the plan is made; [] when no rule of the engine reads it."""
        ...


class BackendPlanner(Protocol):
    """`backend.planner`: the memory plan before launch and what it reads (`cockpit plan`)."""

    def memory_plan(
        self,
        profile: Profile,
        hosts: Iterable[HostFacts],
        *,
        model: Any = None,
        overrides: Mapping[str, Any] | None = None,
        runs: Iterable[Any] = (),
        calibrate_from: str | None = None,
    ) -> Any:
        """The memory plan before launch (cockpit.model.plan.MemoryPlan): weights per rank, KV
        tokens and headroom after capture per memory setting, for the GPUs in `hosts` and the model
        facts `model` (cockpit.model.read.ModelFacts, read by the caller: no I/O here); `runs` are
        journal records that may calibrate it. None when no model is given."""
        ...

    def model_location(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        """Where the profile's model lives as the server is told (SGLang's `model-path`, vLLM's
        `serve MODEL`): what the memory plan reads on node 0. None when the profile names none."""
        ...

    def draft_model_location(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        """The speculative-decoding draft model the flags name (SGLang's `speculative-draft-model-path`,
        vLLM's `speculative-config` "model"): the memory plan reads it beside the model. None if none."""
        ...

    def term_lines(self, terms: Mapping[str, float]) -> list[str]:
        """`cockpit plan`'s lines for the terms only this engine's plan has (its graph pool, its
        activation peak…), with the engine's own figures beside them; [] for none."""
        ...

    def server_flags(self, model_dir: str, tp: int, dp: int | None = None, ep: int | None = None) -> dict[str, Any]:
        """Server flags for `cockpit plan --model-config DIR --tp N [--dp N] [--ep N]` (no profile),
        in this server's own words. Raises FlagError for a combination the server cannot run."""
        ...


class BackendTuner(Protocol):
    """`backend.tuner`: what `cockpit tune` asks for its next launch."""

    def policy(self) -> Any:
        """The pure tuning policy: a module with `Step`, `Move`, `next_move`, `best_step` (and
        optionally `step_facts`, `MEMORY_FLAG`)."""
        ...


class BackendMetrics(Protocol):
    """`backend.metrics`: what a serving server is measured by — its Prometheus endpoint and metric
    names, and its own generate API for the load generator."""

    def path(self) -> str:
        """The Prometheus endpoint ("/metrics")."""
        ...

    def prefix(self) -> str:
        """The prefix of the server's own metric names ("sglang:")."""
        ...

    def serving(self) -> Mapping[str, tuple[str, ...]]:
        """Serving figure -> the engine's metric names (without the prefix), newest first."""
        ...

    def native_api(self) -> GenerateApi | None:
        """The engine's own generate API (`EngineWords.native_api` names it), None when it has none."""
        ...


# the capability groups, by the attribute a Backend holds each in
GROUPS: dict[str, type] = {
    "flags": BackendFlags, "launch": BackendLaunch, "logs": BackendLogs, "doctor": BackendDoctor,
    "planner": BackendPlanner, "tuner": BackendTuner, "metrics": BackendMetrics,
}
# Every engine has these: no run without its flags, its launch and its log.
REQUIRED = ("flags", "launch", "logs")
# An engine may lack these; its Backend then holds None there, and each caller asks and says what
# it cannot do ("plan unavailable for this engine (Echo)", `unavailable`) instead of calling a stub.
OPTIONAL = ("doctor", "planner", "tuner", "metrics")
# what the operator asked for that needs each optional group, in the refusal's words
NEEDED_FOR = {"doctor": "advice", "planner": "plan", "tuner": "tune", "metrics": "serving metrics"}


@runtime_checkable
class Backend(Protocol):
    """One inference server's knowledge, by capability: one door per call (`backend.flags.effective(…)`,
    `backend.launch.node_argvs(…)`, `backend.logs.new_parser()`, `backend.doctor.diagnose(…)`,
    `backend.planner.memory_plan(…)`, `backend.tuner.policy()`, `backend.metrics.serving()`), and
    who it is at the top (name, words, versions). Every method is pure (no I/O besides reading a
    log file in `logs.read`) and cheap to call; the implementation imports its heavy parts on first use.

    `flags`, `launch` and `logs` are required; `doctor`, `planner`, `tuner` and `metrics` are
    capabilities an engine may not have (None): the caller asks before it calls."""

    name: str  # "sglang": the profile's `backend:` value and the RunState.format prefix

    # the groups (read-only: an implementation holds each as a plain attribute of its own type)
    @property
    def flags(self) -> BackendFlags: ...

    @property
    def launch(self) -> BackendLaunch: ...

    @property
    def logs(self) -> BackendLogs: ...

    @property
    def doctor(self) -> BackendDoctor | None: ...

    @property
    def planner(self) -> BackendPlanner | None: ...

    @property
    def tuner(self) -> BackendTuner | None: ...

    @property
    def metrics(self) -> BackendMetrics | None: ...

    def words(self) -> EngineWords:
        """What the UI and the CLI say about this engine (labels, memory flag, port, demo, ranks)."""
        ...

    def versions(self) -> tuple[str, ...]:
        """The server versions whose flags and log formats this backend knows."""
        ...

    def resolve_version(self, version: str | None) -> str:
        """The known version a profile's `version:` (or None) is treated as."""
        ...

    def run_version(self, state: RunState, profile: Profile | None = None) -> str | None:
        """The version a run speaks: the profile's, else what its log showed, else None."""
        ...


def unavailable(backend: Backend, group: str) -> Exception:
    """The refusal of a command that needs an optional group `backend` lacks: bad input (exit 2),
    one line naming what and the engine, no traceback. The caller raises it."""
    what = NEEDED_FOR[group]
    return BadInput(f"{what} unavailable for this engine ({backend.words().display})",
                    hint=f"the {backend.name} backend has no {group}")
