"""The SGLang command builder: profile (+ one-run overrides) -> argv list, never a shell string.

Every flag goes through the version's flag table (`flags.canonical` + `flags.parse_server_args`),
so a profile that SGLang would refuse is refused here first, with the profile key named. Flags
come out in their canonical spelling (`tp: 8` -> `--tp-size 8`), which every version accepts.
"""

from __future__ import annotations

from typing import Any

from cockpit.backends import common
from cockpit.backends.base import FlagError
from cockpit.backends.sglang.flags import (
    BOUNDS,
    FlagSpec,
    canonical,
    flag_table,
    parse_server_args,
    resolve_version,
    value_to_argv,
)
from cockpit.core.findings import FlagChange
from cockpit.core.profile import Profile

LAUNCH_MODULE = "sglang.launch_server"
_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a text value", "int_list": "a list of integers",
               "json": "a JSON value"}


def _check_value(spec: FlagSpec, value: Any, key: str, where: str, version: str) -> Any:
    """The value as SGLang would parse it; FlagError naming the profile key otherwise."""
    return common.check_value(
        spec, value, where, type_words=_TYPE_WORDS, to_argv=value_to_argv,
        parse=lambda argv: parse_server_args(argv, version), bounds=BOUNDS,
    )


def effective_flags(profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None) -> dict[str, tuple[FlagSpec, Any]]:
    """dest -> (spec, typed value) for the profile's server flags with the overrides applied.

    Order is the profile's, overrides replace in place, new ones are appended. Raises FlagError
    naming the profile file and key (or the `--set` item) for unknown, ambiguous or mistyped flags.
    """
    v = resolve_version(version or profile.version)
    out: dict[str, tuple[FlagSpec, Any]] = {}
    sources: list[tuple[str, str, Any]] = [("profile", k, val) for k, val in profile.server.items()]
    sources += [("override", k, val) for k, val in (overrides or {}).items()]
    for origin, key, value in sources:
        where = common.where(profile, key, origin)
        try:
            spec = canonical(key, v)
        except FlagError as exc:
            raise FlagError(exc.flag or key, f"{where}: {exc}") from None
        if spec.name == "--config" and isinstance(value, str) and value.startswith("-"):
            raise FlagError(spec.name, f"{where}: a config path must not start with '-'")
        out[spec.dest] = (spec, _check_value(spec, value, key, where, v))
    return out


def _server_argv(flags: dict[str, tuple[FlagSpec, Any]]) -> list[str]:
    argv: list[str] = []
    for spec, value in flags.values():
        argv += value_to_argv(spec, value)
    return argv


def launcher(profile: Profile) -> list[str]:
    """What starts the server: `profile.program`, or `<python> -m sglang.launch_server`."""
    if profile.program:
        return list(profile.program)
    return [profile.python, "-m", LAUNCH_MODULE]


# SGLang reads no flag from its environment: `--api-key` stays on its command line (docs/DECISIONS.md, "Hardening": secrets).
SECRET_ENV: dict[str, str] = {}


def secret_env(profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None) -> dict[str, str]:
    """Nothing: SGLang has no environment variable for a secret flag."""
    return {}


def build_argv(
    profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None, secrets_in_env: bool = False
) -> list[str]:
    """The argv that starts this profile's server (a list; quote each item if it must cross a shell).
    `secrets_in_env` changes nothing: SGLang takes every flag on its command line."""
    flags = effective_flags(profile, overrides, version=version)
    return launcher(profile) + _server_argv(flags)


def build_node_argv(
    profile: Profile,
    node_rank: int,
    dist_init_addr: str | None = None,
    overrides: dict[str, Any] | None = None,
    version: str | None = None,
    secrets_in_env: bool = False,
) -> list[str]:
    """The argv for one node of a multi-node run: --nnodes/--node-rank/--dist-init-addr filled in.

    `dist_init_addr` defaults to the profile's own `dist-init-addr`; a multi-node run without one
    is refused (SGLang would hang waiting for its peers).
    """
    v = resolve_version(version or profile.version)
    flags = effective_flags(profile, overrides, version=v)
    nnodes_spec = canonical("nnodes", v)
    nnodes = flags.get("nnodes", (nnodes_spec, None))[1] or len(profile.hosts)
    if not 0 <= node_rank < nnodes:
        raise FlagError("--node-rank", f"node rank {node_rank} is outside 0..{nnodes - 1} for {nnodes} nodes")
    extra: dict[str, Any] = {"nnodes": nnodes, "node-rank": node_rank}
    if dist_init_addr is not None:
        extra["dist-init-addr"] = dist_init_addr
    elif "dist_init_addr" not in flags and nnodes > 1:
        raise FlagError("--dist-init-addr", f"{common.where(profile, 'dist-init-addr', 'profile')}: a {nnodes}-node run needs dist-init-addr (host:port of node 0)")
    for key, value in extra.items():
        spec = canonical(key, v)
        flags[spec.dest] = (spec, _check_value(spec, value, key, f"node {node_rank}: {key}", v))
    return launcher(profile) + _server_argv(flags)


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`["mem-fraction-static=0.88", "--tp=8", "enable-metrics"]` -> {"mem-fraction-static": 0.88, "tp": 8, "enable-metrics": True}.

    The leading dashes are optional; a bare name means "turn this on". Values are typed the way a
    YAML profile would type them (0.88 is a float, 8 an int, true/false a bool); the flag table
    checks them later. Raises FlagError for an item that is not FLAG=VALUE.
    """
    return common.parse_overrides(items, example="mem-fraction-static=0.88")


def flag_diff(profile: Profile, flags_as_launched: dict[str, Any], *, version: str | None = None) -> list[FlagChange]:
    """What differs between the profile's server flags and the flags a run was launched with.

    Both sides may spell flags any way the table accepts (`tp`, `tp-size`, `tp_size`); changes
    come out in the canonical spelling, `from` None when the profile did not set the flag.
    """
    v = resolve_version(version or profile.version)
    return common.flag_changes(
        profile.server, flags_as_launched, resolve=lambda k: canonical(k, v), table=flag_table(v),
        differs=lambda old, new: not _same(old, new),
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return abs(float(a) - float(b)) < 1e-12
    if (isinstance(a, str) and isinstance(b, (int, float))) or (isinstance(b, str) and isinstance(a, (int, float))):
        return str(a) == str(b)
    return bool(a == b)
