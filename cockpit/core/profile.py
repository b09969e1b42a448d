"""Launch profiles: YAML files validated by pydantic, with errors that name the file and the key.

A profile says where the server runs (hosts), how it is started (python or program argv), and
the server flags. Flags are checked against the backend's flag table later (command builder);
here we check shape and make sure no value can smuggle anything into a shell or an argv slot.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cockpit.core.engines import DEFAULT_ENGINE, engine_names_known
from cockpit.core.overrides import normalise_flag_name

# A flag name as it appears in a profile: kebab or snake case, no dashes in front required.
FLAG_NAME_RE = re.compile(r"-{0,2}[A-Za-z][A-Za-z0-9_-]*\Z")
# Profile and host names end up in run-directory paths and lock names.
# Every validator here is used with fullmatch and ends in \Z, never `$`: `$` also matches before a
# trailing newline, and a name like "x\n" broke the Slurm batch script's comment line.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")
# Node k > 0 of a multi-node profile keeps its runs (directory, lock) under `<name>.node<k>`
# (supervisor.node_key): a profile named like that would share them.
NODE_SUFFIX_RE = re.compile(r"\.node\d+\Z", re.IGNORECASE)
MAX_PROFILE_BYTES = 256 << 10  # a profile is a page of YAML; a multi-MB file is a mistake or an attack
MAX_NESTING = 16  # deepest a profile needs is 4 (policy, lists of hosts); YAML bombs go far deeper
# values YAML aliases (*name) may add to a profile beyond those its text spells out: a shared host
# list or `<<: *defaults` adds tens; an alias bomb (each anchor ten aliases of the one before) adds
# 10^6 from 0.4 KB, and every layer after the loader walks what it expands to
MAX_ALIAS_VALUES = 10_000
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# ssh destination: alias, user@host, host:port, user@host:port, [v6]:port
# a node's address as the engine's rendezvous flags take it: a host name, IPv4 or IPv6 (no brackets)
ADDRESS_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})\Z|[0-9A-Fa-f:.]{2,45}\Z")
SSH_DEST_RE = re.compile(r"(?:[A-Za-z0-9._-]+@)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?\Z")


class ProfileError(Exception):
    """A profile could not be loaded; the message names the file, the key and what is allowed."""

    def __init__(self, path: str, key: str, problem: str):
        self.path = path
        self.key = key
        self.problem = problem
        super().__init__(f"{path}: {key}: {problem}" if key else f"{path}: {problem}")


def _no_control_chars(value: str, what: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} must not contain a NUL byte")
    if "\n" in value or "\r" in value:
        raise ValueError(f"{what} must be a single line (no newline)")
    return value


class Host(BaseModel):
    """One node. `ssh: local` or `local: true` runs on this machine."""

    model_config = ConfigDict(extra="forbid")
    ssh: str = Field(description="an ~/.ssh/config alias, user@host or user@host:port; 'local' for this machine")
    # one server across nodes: the address the other nodes reach this one at (the head's is the
    # rendezvous address; unset, node 0 names the address of its outward interface), and this
    # node's own environment over the profile's (e.g. a NIC name that differs per node)
    address: str | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("address")
    @classmethod
    def _check_address(cls, v: str | None) -> str | None:
        if v is not None and not ADDRESS_RE.fullmatch(v):
            raise ValueError("an address is a host name or an IPv4/IPv6 address (letters, digits, '.', '-', ':')")
        return v

    @field_validator("env")
    @classmethod
    def _check_host_env(cls, v: dict[str, str]) -> dict[str, str]:
        return _valid_env(v)

    @field_validator("ssh")
    @classmethod
    def _check_dest(cls, v: str) -> str:
        v = _no_control_chars(v, "an ssh destination")
        if v.startswith("-"):
            raise ValueError("an ssh destination must not start with '-' (it would read as an option)")
        if v != "local" and not SSH_DEST_RE.fullmatch(v):
            raise ValueError("expected an ssh alias, user@host or user@host:port (letters, digits, . _ - only)")
        return v

    @property
    def is_local(self) -> bool:
        return self.ssh == "local"

    @property
    def label(self) -> str:
        return "local" if self.is_local else self.ssh


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    target_headroom_gb: float = Field(5.0, alias="target-headroom-gb", gt=0, le=200)
    warn_headroom_gb: float = Field(3.0, alias="warn-headroom-gb", gt=0, le=200)
    host_reserve_gb: float = Field(40.0, alias="host-reserve-gb", ge=0, le=100000)
    # seconds with work outstanding and nothing moving before a ready run is `hung`; None: the
    # engine's default (cockpit/core/hang.py says why)
    hang_after_s: float | None = Field(None, alias="hang-after-s", gt=0, le=86400)
    # Cockpit's requests to a ready server (docs/OPERATIONS.md "Footprint"): the engine's /metrics
    # (serving figures, the hang watch's movement) and the hang probe (a real completion request)
    serving_watch: bool = Field(True, alias="serving-watch")
    hang_probe: bool = Field(True, alias="hang-probe")

    @model_validator(mode="after")
    def _warn_below_target(self) -> Policy:
        if self.warn_headroom_gb > self.target_headroom_gb:
            raise ValueError("warn-headroom-gb must not exceed target-headroom-gb")
        return self


# Slurm names (partition, account, qos) and time limits as sbatch reads them.
SLURM_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}\Z")
SLURM_TIME_RE = re.compile(r"(?:\d+-\d+(?::\d+){0,2}|\d+(?::\d+){0,2}|UNLIMITED|INFINITE)\Z")
# a release as the engines publish them: 0.5.9, 0.5.8.post1 (SGLang), 0.10.1.1 and 0.11.0rc2 (vLLM)
VERSION_RE = re.compile(r"\d+\.\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?\Z")
# sbatch options cockpit sets itself (the job's name, output, directory, script): not in sbatch-args
SLURM_RESERVED = ("--parsable", "--output", "-o", "--error", "-e", "--chdir", "-D", "--wrap", "--job-name", "-J",
                  "--nodes", "-N", "--array", "-a", "--test-only", "--wait", "-W")
_RESERVED_LONG = tuple(o for o in SLURM_RESERVED if o.startswith("--"))
_RESERVED_SHORT = frozenset(o[1] for o in SLURM_RESERVED if len(o) == 2)
# sbatch's short options that take no argument (`sbatch --help`, Slurm 22.05): getopt lets them be
# bundled, so `-Ha0-99` is `-H -a 0-99`. A letter after one of these is read as another option.
_SBATCH_SHORT_NOARG = frozenset("hHIkOQsuvVW")
_SBATCH_SHORT_ARG = frozenset("aAbBcCdDeFGiJLmMnNopqStwx")


def reserved_sbatch_option(arg: str) -> str | None:
    """The option of SLURM_RESERVED that sbatch would read `arg` as, or None.

    sbatch parses with getopt_long, which takes any prefix of a long option (`--arr=0-99` is
    `--array=0-99`, a 100-copy job array) and bundles short options (`-Ha0-99`). A long name that
    is a prefix of a reserved one is refused even when it is also a prefix of another option (then
    sbatch itself would call it ambiguous); a short bundle is read letter by letter as getopt does.
    An unknown short letter is refused too: whether the letters after it are options is not known."""
    if arg.startswith("--"):
        name = arg.split("=", 1)[0]
        return next((o for o in _RESERVED_LONG if o.startswith(name)), None) if len(name) > 2 else None
    for ch in arg[1:]:
        if ch in _RESERVED_SHORT:
            return f"-{ch}"
        if ch in _SBATCH_SHORT_ARG:
            return None  # the rest of the item is this option's value
        if ch not in _SBATCH_SHORT_NOARG:
            return f"-{ch} (not an sbatch short option)"
    return None


class SlurmTarget(BaseModel):
    """`target: {kind: slurm, …}`: the server runs as a Slurm job submitted on a login node.

    The allocation decides the nodes, so a Slurm profile has no `hosts:`; every sbatch value travels
    as its own argv element (never through a shell)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    kind: Literal["slurm"]
    login: str = Field(description="the login node: an ~/.ssh/config alias, user@host[:port], or 'local'")
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = Field(None, description="time limit as sbatch reads it: MM, HH:MM:SS, D-HH:MM, UNLIMITED")
    nodes: int = Field(1, ge=1, le=1024)
    gpus_per_node: int | None = Field(None, alias="gpus-per-node", ge=0, le=64)
    sbatch_args: list[str] = Field(default_factory=list, alias="sbatch-args", max_length=64)

    @field_validator("login")
    @classmethod
    def _check_login(cls, v: str) -> str:
        return Host._check_dest(v)

    @field_validator("partition", "account", "qos")
    @classmethod
    def _check_name(cls, v: str | None) -> str | None:
        if v is not None and not SLURM_NAME_RE.fullmatch(v):
            raise ValueError("a Slurm name is letters, digits, '.', '_' or '-' (not starting with '-'), at most 64")
        return v

    @field_validator("time")
    @classmethod
    def _check_time(cls, v: str | None) -> str | None:
        if v is not None and not SLURM_TIME_RE.fullmatch(v):
            raise ValueError("a time limit looks like 30 (minutes), 4:00:00, 1-12:00 or UNLIMITED")
        return v

    @field_validator("sbatch_args")
    @classmethod
    def _check_args(cls, v: list[str]) -> list[str]:
        for i, arg in enumerate(v):
            _no_control_chars(arg, f"item {i}")
            if not arg.startswith("-") or arg in ("-", "--"):
                raise ValueError(f"item {i} {arg!r}: each item is one sbatch option, written --name=value")
            reserved = reserved_sbatch_option(arg)
            if reserved is not None and reserved.endswith("option)"):
                raise ValueError(f"item {i} {arg!r}: {reserved[:2]} is not an sbatch short option (whether the letters "
                                 "after it are options is unknown); write sbatch options as --name=value")
            if reserved is not None:
                said = arg.split("=", 1)[0]
                as_ = "" if said == reserved else f" (sbatch reads {said} as {reserved})"
                raise ValueError(f"item {i} {arg!r}: cockpit sets {reserved} itself{as_}; allowed: any other sbatch option")
        return v


ServerValue = str | int | float | bool | list[str | int | float]
PD_ROLES = ("prefill", "decode")


def _valid_env(v: dict[str, str]) -> dict[str, str]:
    for k, val in v.items():
        if not ENV_NAME_RE.fullmatch(k):
            raise ValueError(f"environment variable name {k!r} must be letters, digits and '_' (not starting with a digit)")
        if "\x00" in str(val):
            raise ValueError(f"env {k} must not contain a NUL byte")
    return {k: str(val) for k, val in v.items()}


def _mappings_as_json(v: Any) -> Any:
    """A flag written as a YAML mapping (`speculative-config: {method: ngram, …}`) is the JSON text
    the engine takes on its command line (vLLM's `--speculative-config`, `--kv-transfer-config`):
    an operator writes YAML in a profile, not JSON inside a YAML string. What YAML can say and JSON
    cannot (a date, `!!binary`, `.nan`/`.inf`, a set, a key that is not text) is refused here, naming
    the key: Python's json would raise on the first two and write `NaN`/`Infinity`, which is not JSON,
    for the third."""
    if not isinstance(v, dict):
        return v
    out: dict[Any, Any] = {}
    for k, val in v.items():
        if isinstance(val, dict):
            _check_json_value(val, str(k))
            val = json.dumps(val, separators=(",", ":"), allow_nan=False)
        else:
            for item in val if isinstance(val, list) else [val]:
                _check_plain_value(item, str(k))
        out[k] = val
    return out


def _check_plain_value(val: Any, key: str) -> None:
    """A flag's own value: a YAML date or binary would fail pydantic's type check with words
    about `str`; say what YAML made of it instead."""
    if isinstance(val, (dt.date, bytes, set)):
        raise ValueError(f"{key}: {_not_json(val)}")


def _not_json(val: Any) -> str:
    if isinstance(val, dt.date):
        return (f"YAML reads {val.isoformat()} as a date, which an engine's flag cannot take: "
                f"quote it ('{val.isoformat()}') to pass it as text")
    if isinstance(val, bytes):
        return "is binary (!!binary), which JSON cannot hold: give it as a base64 string"
    if isinstance(val, set):
        return "is a YAML set (!!set), which JSON cannot hold: give a list"
    if isinstance(val, float):
        return (f"is {val!r} (YAML .nan/.inf), which JSON cannot hold (Python would write "
                "NaN/Infinity, which is not JSON): give a finite number")
    return f"is a {type(val).__name__}, which JSON cannot hold"


def _check_json_value(val: Any, key: str) -> None:
    """Every value inside a JSON-valued mapping is one JSON can hold: text, a finite number, true/
    false, null, a list or a mapping keyed by text."""
    if isinstance(val, dict):
        for k, item in val.items():
            if not isinstance(k, str):
                raise ValueError(f"{key}: the key {k!r} is not text (YAML reads on/off/yes/no as true/false, "
                                 "numbers and dates as themselves; JSON keys are text): quote it")
            _check_json_value(item, f"{key}.{k}")
    elif isinstance(val, list):
        for i, item in enumerate(val):
            _check_json_value(item, f"{key}[{i}]")
    elif isinstance(val, float):
        if not math.isfinite(val):
            raise ValueError(f"{key}: {_not_json(val)}")
    elif val is not None and not isinstance(val, (str, int, bool)):
        raise ValueError(f"{key}: {_not_json(val)}")


def _valid_server(v: dict[str, Any]) -> dict[str, Any]:
    for k, val in v.items():
        if not FLAG_NAME_RE.fullmatch(k):
            raise ValueError(f"flag name {k!r} must be letters, digits, '-' or '_'")
        items = val if isinstance(val, list) else [val]
        for item in items:
            if isinstance(item, str):
                _no_control_chars(item, f"the value of {k}")
                if item.startswith("-") and not _is_number(item):
                    raise ValueError(f"the value of {k} must not start with '-' (it would read as another flag)")
    return {k.lstrip("-"): val for k, val in v.items()}


class Group(BaseModel):
    """One group of a prefill/decode deployment (`groups: {prefill: …, decode: …}`): its own hosts,
    GPUs and server flags, laid over the profile's top-level ones."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    hosts: list[Host] | None = Field(None, min_length=1, max_length=1024)
    gpus: int | None = Field(None, ge=1, le=64, description="GPUs per host this group's servers use")
    server: dict[str, ServerValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    log: str | None = None

    @field_validator("server", mode="before")
    @classmethod
    def _server_mappings(cls, v: Any) -> Any:
        return _mappings_as_json(v)

    @field_validator("server")
    @classmethod
    def _check_server(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _valid_server(v)

    @field_validator("env")
    @classmethod
    def _check_env(cls, v: dict[str, str]) -> dict[str, str]:
        return _valid_env(v)

    @field_validator("log")
    @classmethod
    def _check_log(cls, v: str | None) -> str | None:
        if v is not None and (not _no_control_chars(v, "a path") or v.startswith("-")):
            raise ValueError("must not be empty or start with '-' (it would read as an option)")
        return v

    @model_validator(mode="after")
    def _check_group_hosts(self) -> Group:
        if self.hosts is not None and len(self.hosts) > 1 and any(h.is_local for h in self.hosts):
            raise ValueError("a multi-node group must name every node by ssh, not 'local'")
        return self


class Router(BaseModel):
    """The router in front of the two groups (SGLang's `sglang_router.launch_router
    --pd-disaggregation`, vLLM's proxy): where it runs, its port, and its program when the
    engine has no built-in one."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    host: Host = Field(default_factory=lambda: Host(ssh="local"))
    port: int = Field(8000, ge=1, le=65535)
    program: list[str] | None = Field(None, min_length=1, max_length=64)
    args: list[str] = Field(default_factory=list, max_length=64)

    @field_validator("program", "args")
    @classmethod
    def _check_argv(cls, v: list[str] | None) -> list[str] | None:
        for i, item in enumerate(v or []):
            _no_control_chars(item, f"argument {i}")
        return v

    @field_validator("program")
    @classmethod
    def _check_program(cls, v: list[str] | None) -> list[str] | None:
        if v and v[0].startswith("-"):
            raise ValueError("program[0] must be a command, not an option")
        return v


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    backend: str = DEFAULT_ENGINE
    version: str | None = Field(None, description="server version, e.g. 0.5.9; detected when absent")
    hosts: list[Host] = Field(default_factory=lambda: [Host(ssh="local")], min_length=1)
    python: str = "python3"
    program: list[str] | None = None
    workdir: str = "."
    log: str = "logs/server.log"
    env: dict[str, str] = Field(default_factory=dict)
    server: dict[str, ServerValue] = Field(default_factory=dict)
    policy: Policy = Field(default_factory=lambda: Policy.model_validate({}))
    target: SlurmTarget | None = None
    # unattended mode (issue 17): what the TUI does when the run crashes, how often it may restart
    # by itself, and a command run (argv, no shell) with the crash summary in its environment
    on_crash: Literal["ask", "restart-with-advice", "restart", "stop"] = Field("ask", alias="on-crash")
    on_crash_max_per_hour: int = Field(3, alias="on-crash-max-per-hour", ge=0, le=60)
    # a `hung` run (policy.hang-after-s): ring and notify only, or restart it as is (within the
    # same hourly budget as on-crash); never restarted unless the profile says so
    on_hang: Literal["notify", "restart"] = Field("notify", alias="on-hang")
    notify: list[str] | None = Field(None, min_length=1, max_length=64)
    # prefill/decode disaggregation (issue 25): one profile, two groups of servers and the router
    groups: dict[Literal["prefill", "decode"], Group] | None = None
    router: Router | None = None

    @field_validator("notify")
    @classmethod
    def _check_notify(cls, v: list[str] | None) -> list[str] | None:
        for item in v or []:
            _no_control_chars(item, "a notify argument")
        return v

    # where this profile was loaded from; not part of the YAML
    source: str | None = Field(None, exclude=True)

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError("a name is 1-100 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")
        if NODE_SUFFIX_RE.search(v):
            base = NODE_SUFFIX_RE.sub("", v)
            raise ValueError(f"a name must not end in '.node<N>': node N of a multi-node profile {base!r} keeps its "
                             f"runs and lock under {v!r}, and the two would share them")
        return v

    @field_validator("backend")
    @classmethod
    def _check_backend(cls, v: str) -> str:
        known = engine_names_known()
        if known and v not in known:
            raise ValueError(f"the supported backends are: {', '.join(known)}")
        return v

    @field_validator("version")
    @classmethod
    def _check_version(cls, v: str | None) -> str | None:
        if v is not None and not VERSION_RE.fullmatch(v):
            raise ValueError("a version looks like 0.5.9, 0.5.8.post1 or 0.11.0rc2")
        return v

    @field_validator("python", "workdir", "log")
    @classmethod
    def _check_path_like(cls, v: str) -> str:
        v = _no_control_chars(v, "a path")
        if not v:
            raise ValueError("must not be empty")
        if v.startswith("-"):
            raise ValueError("must not start with '-' (it would read as an option)")
        return v

    @field_validator("program")
    @classmethod
    def _check_program(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("program must be a non-empty argv list, e.g. [/opt/venv/bin/python, -m, my_server]")
        for i, item in enumerate(v):
            _no_control_chars(item, f"program[{i}]")
        if v[0].startswith("-"):
            raise ValueError("program[0] must be a command, not an option")
        return v

    @field_validator("env")
    @classmethod
    def _check_env(cls, v: dict[str, str]) -> dict[str, str]:
        return _valid_env(v)

    @field_validator("server", mode="before")
    @classmethod
    def _server_mappings(cls, v: Any) -> Any:
        return _mappings_as_json(v)

    @field_validator("server")
    @classmethod
    def _check_server(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _valid_server(v)

    @model_validator(mode="after")
    def _check_hosts(self) -> Profile:
        if len(self.hosts) > 1 and any(h.is_local for h in self.hosts):
            raise ValueError("hosts: a multi-node profile must name every node by ssh, not 'local'")
        if self.groups is not None:
            missing = [r for r in PD_ROLES if r not in self.groups]
            if missing:
                raise ValueError(f"groups: a prefill/decode deployment declares both groups; {' and '.join(missing)} is missing")
            if self.target is not None:
                raise ValueError("groups: a Slurm profile (target:) cannot declare prefill/decode groups yet; "
                                 "write one profile per group")
        elif self.router is not None:
            raise ValueError("router: a router joins a prefill group and a decode group; declare groups: first")
        if self.target is not None:
            if "hosts" in self.model_fields_set:
                raise ValueError("target: a Slurm profile has no hosts: (the allocation decides the nodes)")
            # one entry per node, each reached through the login node (logs are on the shared
            # filesystem): len(hosts) stays the node count every layer reads
            self.hosts = [Host(ssh=self.target.login)] * self.target.nodes
        return self

    # ---- helpers used by every layer ----
    def flag(self, name: str, default: Any = None) -> Any:
        """A server flag's value by name, kebab- or snake-case, with or without dashes."""
        want = normalise_flag_name(name)
        for k, v in self.server.items():
            if normalise_flag_name(k) == want:
                return v
        return default

    @property
    def log_path(self) -> str:
        if self.log.startswith("/") or self.log.startswith("~"):
            return self.log
        return f"{self.workdir.rstrip('/')}/{self.log}"

    def group_profile(self, role: str) -> Profile:
        """One group of a prefill/decode profile as the profile of its own servers, named
        `NAME.ROLE`: the top level's keys, the group's hosts, its flags and env over the top
        level's, its own log (`logs/server.ROLE.log` from `logs/server.log` unless it names one).
        Every command runs a group as it runs a profile (`cockpit up NAME.prefill`)."""
        if not self.groups or role not in self.groups:
            raise ValueError(f"{self.name} declares no {role} group")
        g = self.groups[role]
        data = self.model_dump(by_alias=True, exclude={"groups", "router", "source", "target"}, exclude_none=True)
        data["name"] = f"{self.name}.{role}"
        if g.hosts is not None:
            data["hosts"] = [h.model_dump() for h in g.hosts]
        data["server"] = {**self.server, **g.server}
        data["env"] = {**self.env, **g.env}
        stem, dot, ext = self.log.rpartition(".")
        data["log"] = g.log or (f"{stem}.{role}.{ext}" if dot and "/" not in ext else f"{self.log}.{role}")
        prof = Profile.model_validate(data)
        prof.source = self.source
        return prof

    def group_profiles(self) -> list[tuple[str, Profile]]:
        """(role, profile) for each group, prefill first; empty for a plain profile."""
        return [(r, self.group_profile(r)) for r in PD_ROLES] if self.groups else []


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _loc_to_key(loc: Iterable[Any]) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts)


def _first_error(path: str, exc: ValidationError) -> ProfileError:
    err = exc.errors()[0]
    loc = [p for p in err.get("loc", ()) if not (isinstance(p, str) and "[" in p)]
    key = _loc_to_key(loc) or "(top level)"
    msg = err.get("msg", "invalid")
    msg = msg.removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown key; allowed here: " + ", ".join(_allowed_keys(loc))
    elif err.get("type") == "missing":
        msg = "required key is missing"
    return ProfileError(path, key, msg)


def _allowed_keys(loc: list[Any]) -> list[str]:
    model: type[BaseModel] = Profile
    for p in loc[:-1]:
        if p == "policy":
            model = Policy
        elif p == "target":
            model = SlurmTarget
        elif p == "hosts":
            model = Host
        elif p in ("prefill", "decode") and model is Profile:
            model = Group
        elif p == "router":
            model = Router
        elif p == "host" and model is Router:
            model = Host
    names = []
    for fname, f in model.model_fields.items():
        if fname == "source":
            continue
        names.append(f.alias or fname)
    return names


def parse_profile(data: Any, path: str = "<profile>") -> Profile:
    if not isinstance(data, dict):
        raise ProfileError(path, "", "the file must hold a YAML mapping (name:, hosts:, server:, …)")
    try:
        prof = Profile.model_validate(data)
    except ValidationError as exc:
        raise _first_error(path, exc) from None
    prof.source = path
    return prof


def load_profile(path: str | Path) -> Profile:
    """Load and validate one profile file. Raises ProfileError (never a traceback for bad input)."""
    return parse_profile(read_profile_yaml(path), str(path))


def read_profile_yaml(path: str | Path) -> Any:
    """A profile file's YAML as data, through every guard of the loader (size, nesting, aliases,
    duplicate keys), not yet validated. Raises ProfileError."""
    p = Path(path)
    spath = str(path)
    try:
        size = p.stat().st_size
        if size > MAX_PROFILE_BYTES and p.is_file():
            raise ProfileError(spath, "", f"is {size / (1 << 20):.1f} MiB; a profile is at most "
                                          f"{MAX_PROFILE_BYTES >> 10} KiB (is this the right file?)")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(spath, "", "no such file") from None
    except IsADirectoryError:
        raise ProfileError(spath, "", "is a directory, expected a YAML file") from None
    except UnicodeDecodeError:
        raise ProfileError(spath, "", "is not UTF-8 text") from None
    except OSError as exc:
        raise ProfileError(spath, "", f"cannot be read ({exc.strerror})") from None
    depth = _bracket_depth(text)
    if depth > MAX_NESTING:
        raise ProfileError(spath, "", f"nests {depth} levels deep; a profile needs at most {MAX_NESTING}")
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except _AliasBomb as exc:
        raise ProfileError(spath, exc.key, exc.problem) from None
    except _DuplicateKey as exc:
        raise ProfileError(spath, exc.key, f"appears twice (line {exc.first} and line {exc.second}); "
                                           "YAML would silently keep the last: keep one") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        raise ProfileError(spath, where, f"not valid YAML ({getattr(exc, 'problem', exc)})") from None
    except RecursionError:  # indentation nesting the bracket count cannot see
        raise ProfileError(spath, "", f"nests too deeply; a profile needs at most {MAX_NESTING} levels") from None
    return data


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: int, second: int):
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


class _AliasBomb(Exception):
    def __init__(self, key: str, problem: str):
        super().__init__(problem)
        self.key, self.problem = key, problem


def _check_aliases(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand it past MAX_ALIAS_VALUES more values than its text
    holds, or that contains itself (`&a [*a]`). Counted on the composed nodes, before anything is
    built: an alias is the anchored node itself, so each distinct node is counted once (memo) and
    its expanded size added wherever it is referred to."""
    expanded: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: yaml.Node) -> int:
        known = expanded.get(id(node))
        if known is not None:
            return known
        if id(node) in open_:
            where = node.start_mark.line + 1 if node.start_mark else "?"
            raise _AliasBomb(f"line {where}", "a YAML alias refers to the node that holds it (it contains "
                                              "itself, without end); a profile cannot")
        open_.add(id(node))
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        open_.discard(id(node))
        expanded[id(node)] = n
        return n

    total = size(root)
    own = len(expanded)  # distinct nodes: what the text spells out
    if total - own > MAX_ALIAS_VALUES:
        raise _AliasBomb("", f"YAML aliases (*name) expand {own:,} values into {total:,}; a profile's aliases may "
                             f"add at most {MAX_ALIAS_VALUES:,} (an alias bomb?): write the values out, or alias less")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (plain YAML keeps the last one,
    so `tp: 8` early in a file and `tp: 4` further down would silently launch TP4), and a
    document whose aliases expand it without bound (`_check_aliases`)."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_aliases(node)
        return self.construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # SafeLoader refuses an unhashable key itself, with its own message
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(str(key), seen[key], line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _bracket_depth(text: str) -> int:
    """How deep flow collections ([ and {) nest, counted without parsing (quotes ignored: an
    over-count only refuses a profile nobody writes)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


@dataclass(frozen=True)
class ProfileRef:
    """A profile found on disk (the picker lists these; loading may still fail)."""

    name: str
    path: Path
