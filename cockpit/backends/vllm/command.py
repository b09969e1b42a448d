"""The vLLM command builder: profile (+ one-run overrides) -> `vllm serve MODEL …` argv, never a
shell string.

The profile's `server.model` reaches the engine the way its entry point reads it (`model_argv`):
`vllm serve MODEL` (the positional) for the `vllm` CLI's `serve`, `--model MODEL` for
`python -m vllm.entrypoints.openai.api_server` (which accepts a positional and IGNORES it, loading
its default model) and for any other wrapper program (every vLLM entry point reads `--model`; a
wrapper that passes its arguments on gets it through). A profile whose `program` already names a
model besides `server.model` is refused, naming the key: the engine would silently use one of the
two. Every other key goes through the version's flag table, so a profile vLLM would refuse (an
unknown, ambiguous, renamed or mistyped flag) is refused here first with the profile file and key
named. Flags come out in their canonical spelling (`tp: 2` -> `--tensor-parallel-size 2`).
"""

from __future__ import annotations

from typing import Any

from cockpit.backends import common
from cockpit.backends.base import FlagError
from cockpit.backends.vllm.flags import (
    BOUNDS,
    FlagSpec,
    canonical,
    flag_table,
    parse_serve_args,
    resolve_version,
    value_to_argv,
)
from cockpit.core.findings import FlagChange
from cockpit.core.numbers import as_float
from cockpit.core.profile import Profile

_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a text value", "int_list": "a list of integers",
               "json": "a JSON value", "bytes": "a byte count (e.g. 20G)", "len": "a token count (e.g. 32k)",
               "count": "a count (e.g. 8192, 8k)", "str_list": "one or more texts"}


def _check_value(spec: FlagSpec, value: Any, where: str, version: str) -> Any:
    return common.check_value(
        spec, value, where, type_words=_TYPE_WORDS, to_argv=value_to_argv,
        parse=lambda argv: parse_serve_args(argv, version), bounds=BOUNDS,
    )


def effective_flags(
    profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None
) -> dict[str, tuple[FlagSpec, Any]]:
    """dest -> (spec, typed value) for the profile's flags with the overrides applied (model included)."""
    v = resolve_version(version or profile.version)
    out: dict[str, tuple[FlagSpec, Any]] = {}
    sources = [("profile", k, val) for k, val in profile.server.items()]
    sources += [("override", k, val) for k, val in (overrides or {}).items()]
    for origin, key, value in sources:
        where = common.where(profile, key, origin)
        try:
            spec = canonical(key, v)
        except FlagError as exc:
            raise FlagError(exc.flag or key, f"{where}: {exc}") from None
        out[spec.dest] = (spec, _check_value(spec, value, where, v))
    return out


# Flags vLLM also reads from its environment (vllm/entrypoints/openai/api_server.py takes
# `args.api_key or envs.VLLM_API_KEY`): a launch hands them over there, never in argv, so no other
# local user's `ps` can read them (the run's env file is 0600, /proc/PID/environ the owner's alone).
SECRET_ENV = {"api_key": "VLLM_API_KEY"}


def secret_env(profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None) -> dict[str, str]:
    """{environment variable: value} for the secret flags this launch passes outside argv."""
    flags = effective_flags(profile, overrides, version=version)
    return {SECRET_ENV[dest]: str(value) for dest, (_spec, value) in flags.items()
            if dest in SECRET_ENV and value is not None and value != ""}


def launcher(profile: Profile) -> list[str]:
    """What starts the server: `profile.program`, or `vllm serve`."""
    if profile.program:
        return list(profile.program)
    return ["vllm", "serve"]


API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def entry_point(program: list[str]) -> str:
    """Which of the ways operators start vLLM `program` is: `serve` (the `vllm` CLI's `serve`, or
    `python -m vllm.entrypoints.cli.main serve`), `api_server` (`python -m
    vllm.entrypoints.openai.api_server`) or `wrapper` (anything else: a script, a container entry).
    A program ending in `serve` reads like `vllm serve` (the simulator's `cockpit sim … serve` too)."""
    for i, item in enumerate(program):
        if item == "-m" and i + 1 < len(program) and program[i + 1] == API_SERVER_MODULE:
            return "api_server"
    if program and program[-1] == "serve":
        return "serve"
    return "wrapper"


def _model_in_program(program: list[str]) -> str | None:
    """The model `program` already names (a `--model` item, or a positional right after `serve`)."""
    for i, item in enumerate(program):
        if item == "--model" and i + 1 < len(program):
            return program[i + 1]
        if item.startswith("--model="):
            return item.partition("=")[2]
        if item == "serve" and i >= 1 and i + 1 < len(program) and not program[i + 1].startswith("-"):
            return program[i + 1]
    return None


def model_argv(profile: Profile, model: str) -> list[str]:
    """`server.model` as the profile's entry point reads it (see the module's docstring). Raises
    FlagError naming `program` when the program already names a model of its own."""
    program = launcher(profile)
    kind = entry_point(program)
    src = profile.source or profile.name
    given = _model_in_program(program)
    if given is not None:
        raise FlagError("--model", f"{src}: program: names the model {given!r} itself and server.model is {model!r}: "
                                   "vLLM would load one and ignore the other; keep only server.model")
    if kind == "serve":
        return [model]
    return ["--model", model]


def build_argv(
    profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None, secrets_in_env: bool = False
) -> list[str]:
    """`vllm serve MODEL --flag value …` (a list; quote each item if it must cross a shell). With
    `secrets_in_env` the SECRET_ENV flags are left out: the launch passes them in the environment."""
    flags = effective_flags(profile, overrides, version=version)
    model = flags.pop("model", None)
    if model is None or not model[1]:
        src = profile.source or profile.name
        kind = entry_point(launcher(profile))
        why = (f"without it `python -m {API_SERVER_MODULE}` silently loads vLLM's default model" if kind == "api_server"
               else "vllm serve MODEL")
        raise FlagError("--model", f"{src}: server.model is required ({why})")
    argv = [*launcher(profile), *model_argv(profile, str(model[1]))]
    for spec, value in flags.values():
        if secrets_in_env and spec.dest in SECRET_ENV:
            continue
        argv += value_to_argv(spec, value)
    return argv


def build_node_argv(
    profile: Profile, node_rank: int, dist_init_addr: str | None = None,
    overrides: dict[str, Any] | None = None, version: str | None = None, secrets_in_env: bool = False,
) -> list[str]:
    """One node of a multi-node run. vLLM has two ways across nodes (docs, "Across nodes"):
    - DP (`--data-parallel-size` > 1): each node runs its share of the DP ranks with
      `--data-parallel-size-local`, `--data-parallel-start-rank`, the head's `--data-parallel-address`
      and `--data-parallel-rpc-port`; the other nodes are `--headless` (no API server);
    - otherwise TP/PP across nodes (0.11.1+, mp executor): `--nnodes/--node-rank/--master-addr/
      --master-port`, `--headless` on node rank > 0.
    `dist_init_addr` is the head's HOST:PORT (the rendezvous); flags the profile sets win."""
    v = resolve_version(version or profile.version)
    nnodes = len(profile.hosts)
    flags = effective_flags(profile, overrides, version=v)
    extra: dict[str, Any] = dict(overrides or {})
    host, port = _split_addr(dist_init_addr)
    dp = _int_flag(flags, "data_parallel_size", 1)
    if dp > 1:
        local = _int_flag(flags, "data_parallel_size_local", 0) or dp // nnodes
        if local * nnodes != dp:
            raise FlagError("--data-parallel-size", f"{common.where(profile, 'data-parallel-size', 'profile')}: "
                            f"{dp} DP ranks do not split evenly over {nnodes} nodes")
        extra["data-parallel-size-local"] = local
        if node_rank > 0:  # on the head vLLM reads a start rank as hybrid load balancing (arg_utils.py)
            extra["data-parallel-start-rank"] = node_rank * local
        if host and "data_parallel_address" not in flags:
            extra["data-parallel-address"] = host
        if port is not None and "data_parallel_rpc_port" not in flags:
            extra["data-parallel-rpc-port"] = port
    else:
        extra.update({"nnodes": nnodes, "node-rank": node_rank})
        if host and "master_addr" not in flags:
            extra["master-addr"] = host
        if port is not None and "master_port" not in flags:
            extra["master-port"] = port
    if node_rank > 0:
        extra["headless"] = True  # only node 0 serves the API
    return build_argv(profile, extra, version=v, secrets_in_env=secrets_in_env)


def _split_addr(addr: str | None) -> tuple[str | None, int | None]:
    if not addr:
        return None, None
    host, _, port = addr.rpartition(":")
    return (host or addr), (int(port) if port.isdigit() else None)


def _int_flag(flags: dict[str, tuple[FlagSpec, Any]], dest: str, default: int) -> int:
    value = flags.get(dest, (None, None))[1]
    return default if value is None or isinstance(value, bool) else int(value)


def rendezvous_addr(flags: dict[str, Any]) -> str | None:
    """The head's HOST:PORT the profile's own flags name (DP's address and RPC port, or TP's master
    address and port), else None (the launch picks a free port on the head)."""
    value = common.flag_value
    dp = value(flags, "data-parallel-size", "dp")
    if dp is not None and not isinstance(dp, bool) and int(dp) > 1:
        host, port = value(flags, "data-parallel-address", "dpa"), value(flags, "data-parallel-rpc-port", "dpp")
    else:
        host, port = value(flags, "master-addr"), value(flags, "master-port")
    return f"{host}:{port}" if host and port else None


def flag_diff(profile: Profile, flags_as_launched: dict[str, Any], *, version: str | None = None) -> list[FlagChange]:
    """What differs between the profile's flags and the flags a run was launched with."""
    v = resolve_version(version or profile.version)
    return common.flag_changes(
        profile.server, flags_as_launched, resolve=lambda k: canonical(k, v), table=flag_table(v),
        differs=lambda old, new: old != new and not (as_float(old) is not None and as_float(old) == as_float(new)),
    )


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`["gpu-memory-utilization=0.9", "enforce-eager"]` -> {"gpu-memory-utilization": 0.9, "enforce-eager": True}.

    Values are typed as a YAML profile would type them; the flag table checks them later. A value
    with a newline or NUL is refused, as in a profile (FlagError naming the key).
    """
    return common.parse_overrides(items, example="gpu-memory-utilization=0.9")
