"""Hostile profile values: every field, fed shell metacharacters, quotes, newlines, NUL,
option-like strings and unicode, is either refused by validation naming its key, or reaches the
server as exactly one argv element (or one environment value) — run for real through the local
and the SSH transport with a harmless echo program; canary files prove no shell interpreted one."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cockpit.backends.base import FlagError
from cockpit.backends.sglang.command import build_argv
from cockpit.core.profile import Profile, ProfileError, load_profile
from cockpit.remote.host import HostOps
from cockpit.transport.base import Transport, TransportError
from cockpit.transport.local import LocalTransport
from cockpit.transport.ssh import SSHTransport
from tests.reliability.helpers import PY

ECHO = str(Path(__file__).with_name("_argv_echo.py"))
# For argv-only cases a faster echo than a python start-up: coreutils printf, one NUL per argument.
PRINTF = shutil.which("printf") or "/usr/bin/printf"
SSH_PER_FIELD = 8


def hostile_values(canary: Path) -> list[str]:
    c = str(canary)
    return [
        f"$(touch {c})", f";touch {c}", f"`touch {c}`", f"| touch {c}", f"&& touch {c}", f"x; touch {c} #",
        f"$(touch {c}", f"'; touch {c}; '", f'"; touch {c}; "', f"\\'; touch {c}", f"a\ntouch {c}",
        f"> {c}", f"$((1+1))$(touch {c})", f"${{IFS}}touch${{IFS}}{c}", "$HOME", "~", "*", "?", "[a]",
        "--foo", "-c", "--model-path=/etc/passwd", "-", "--", "=", "a=b", "a b", " ", "\t", "",
        "'", '"', "\\", "\\\n", "\r", "x\ry", "\x00", "a\x00b", "\x1b[31mred", "é漢字🙂", "\u202egnp.exe",
        "%s%n", "{}", "!!", "#comment",
    ]


def values(canary: Path) -> st.SearchStrategy[str]:
    hostile = st.sampled_from(hostile_values(canary))
    return st.one_of(
        hostile,
        st.text(max_size=12),
        st.lists(st.one_of(hostile, st.text(max_size=4)), min_size=2, max_size=3).map("".join),
    )


FIELDS = ("name", "version", "hosts.ssh", "python", "program", "workdir", "log", "env.key", "env.value",
          "server.key", "server.value", "server.list")


def base(canary_dir: Path) -> dict[str, Any]:
    return {"name": "fuzz", "hosts": [{"ssh": "local"}], "program": [PRINTF, "%s\\0"],
            "workdir": str(canary_dir), "log": "fuzz.log", "env": {"COCKPIT_ECHO_ENV": ""},
            "server": {"model-path": "/models/x", "tp": 1}}


def put(data: dict[str, Any], field: str, value: str) -> tuple[str, str]:
    """Set `field` to `value`; (the top-level key an error must name, a word it must mention)."""
    if field == "name":
        data["name"] = value
    elif field == "version":
        data["version"] = value
    elif field == "hosts.ssh":
        data["hosts"] = [{"ssh": value}]
        return "hosts", "hosts[0].ssh"
    elif field == "python":
        data.pop("program")
        data["python"] = value
    elif field == "program":
        data["program"] = [PRINTF, "%s\\0", value]
        return "program", "program"
    elif field in ("workdir", "log"):
        data[field] = value
    elif field == "env.key":
        data["program"] = [PY, ECHO]
        # the echo reports the variable only when its name is one (a refused name is never run)
        data["env"] = {value: "1", "COCKPIT_ECHO_ENV": value if re.match(r"^[A-Za-z_]\w*$", value, re.ASCII) else ""}
        return "env", repr(value) if value else "env"
    elif field == "env.value":
        data["program"] = [PY, ECHO]
        data["env"] = {"FUZZ_VALUE": value, "COCKPIT_ECHO_ENV": "FUZZ_VALUE"}
        return "env", "FUZZ_VALUE"
    elif field == "server.key":
        data["server"] = {**data["server"], value: "1"}
        return "server", repr(value)
    elif field == "server.value":
        data["server"] = {**data["server"], "model-path": value}
        return "server", "model-path"
    elif field == "server.list":
        data["server"] = {**data["server"], "model-path": [value]}
        return "server", "model-path"
    return field, field


class Case:
    def __init__(self, field: str, value: str, profile: Profile, argv: list[str]):
        self.field, self.value, self.profile, self.argv = field, value, profile, argv


def _check_one(field: str, value: str, tmp: Path, cases: list[Case], counts: dict[str, int]) -> None:
    data = base(tmp)
    top, word = put(data, field, value)
    path = tmp / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    try:
        profile = load_profile(path)
    except ProfileError as exc:
        counts["refused"] += 1
        assert exc.key.split(".")[0].split("[")[0] == top, (field, value, exc.key, str(exc))
        assert word in str(exc), (field, value, str(exc))
        return
    try:
        argv = build_argv(profile)
    except FlagError as exc:
        counts["refused"] += 1
        assert field.startswith("server"), (field, value, str(exc))
        named = value.lstrip("-") if field == "server.key" else "server.model-path"
        assert named in str(exc), (field, value, str(exc))
        return
    counts["accepted"] += 1
    # accepted: the value is exactly one argv element (or one env value), never split or joined
    if field == "program":
        assert argv[2] == value and argv.count(value) >= 1
    elif field == "python":
        assert argv[0] == value
    elif field in ("server.value", "server.list"):
        i = argv.index("--model-path")
        assert argv[i + 1] == value, argv
    elif field == "env.value":
        data["program"] = [PY, ECHO]
        assert profile.env["FUZZ_VALUE"] == value
    if field in ("program", "server.value", "server.list", "env.value", "env.key", "server.key"):
        cases.append(Case(field, value, profile, argv))


async def _run_all(transport: Transport, cases: list[Case]) -> int:
    ran = 0
    for c in cases:
        env = dict(c.profile.env)
        try:
            done = await transport.run(c.argv, env=env, cwd=c.profile.workdir, timeout=30)
        except TransportError as exc:
            raise AssertionError(f"{transport.label}: {c.field}={c.value!r}: {exc}") from None
        assert done.returncode == 0, (transport.label, c.field, c.value, done.stderr[-500:])
        if c.argv[0] == PRINTF:
            got = [a.decode("utf-8", "surrogateescape") for a in done.stdout.split(b"\0")[:-1]]
            assert got == c.argv[2:], (transport.label, c.field, c.value, got)
            ran += 1
            continue
        out = json.loads(done.stdout.decode("utf-8", "surrogateescape").strip().splitlines()[-1])
        assert out["argv"] == c.argv[2:], (transport.label, c.field, c.value, out["argv"])
        names = [n for n in env.get("COCKPIT_ECHO_ENV", "").split(",") if n]
        for n in names:
            assert out["env"][n] == env[n], (transport.label, n, env[n], out["env"][n])
        ran += 1
    return ran


def test_profile_values_are_refused_by_key_or_passed_as_one_argv_element(ssh_env, tmp_path: Path, ledger) -> None:
    canary = tmp_path / "CANARY"
    work = tmp_path / "work"
    work.mkdir()
    cases: list[Case] = []
    counts = {"refused": 0, "accepted": 0}
    # every field against every listed hostile value, then hypothesis for the rest
    for field in FIELDS:
        for v in hostile_values(canary):
            _check_one(field, v, work, cases, counts)

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(field=st.sampled_from(FIELDS), value=values(canary))
    def fuzz(field: str, value: str) -> None:
        _check_one(field, value, work, cases, counts)

    fuzz()
    tried = counts["refused"] + counts["accepted"]
    ledger.tried("profiles", tried)
    assert counts["refused"] > 50 and counts["accepted"] > 50, counts
    # the accepted ones, run for real: locally (no shell) and over SSH (one quoted command line)
    seen: set[tuple[str, ...]] = set()
    unique = []
    for c in cases:
        key = (*c.argv, *sorted(f"{k}={v}" for k, v in c.profile.env.items()))
        if key not in seen:
            seen.add(key)
            unique.append(c)
    local = asyncio.run(_run_all(LocalTransport(), unique))

    # over SSH each command costs a session (~0.2 s here): the first few of every field, the
    # listed hostile values coming first
    per_field: dict[str, list[Case]] = {}
    for c in unique:
        per_field.setdefault(c.field, []).append(c)
    sample = [c for group in per_field.values() for c in group[:SSH_PER_FIELD]]

    async def over_ssh() -> int:
        t = SSHTransport("gpu-box-1")
        try:
            return await _run_all(t, sample)
        finally:
            await t.close()

    remote = asyncio.run(over_ssh())
    ledger.tried("profiles", local + remote)
    ledger.note(f"profile values: {counts['refused']} refused with their key, {counts['accepted']} accepted; "
                f"{local} run locally, {remote} over SSH")
    assert not canary.exists(), "a shell interpreted a profile value"
    assert not (work / "CANARY").exists()


async def test_hostile_argv_env_and_workdir_through_the_real_launch_over_ssh(ssh_env, tmp_path: Path, ledger) -> None:
    canary = tmp_path / "CANARY"
    hostile = [v for v in hostile_values(canary) if "\x00" not in v]
    # a working directory whose very name is a command substitution
    workdir = tmp_path / f"$(touch {canary})" / "w d"
    workdir.mkdir(parents=True)
    env = {f"FUZZ_{i}": v for i, v in enumerate(hostile)}
    env["COCKPIT_ECHO_ENV"] = ",".join(env)
    for t in (LocalTransport(), SSHTransport("gpu-box-1")):
        ops = HostOps(t, runs_root=str(tmp_path / "runs"))
        name = "ssh" if isinstance(t, SSHTransport) else "local"
        argv = [PY, ECHO, *hostile]
        res = await ops.launch(f"fz-{name}", "r1", argv, env=env, cwd=str(workdir), log=f"{name}.log")
        assert res.get("launched"), res
        log = workdir / f"{name}.log"
        for _ in range(200):
            if log.exists() and log.read_bytes().endswith(b"\n"):
                break
            await asyncio.sleep(0.05)
        out = json.loads(log.read_text().strip().splitlines()[-1])
        assert out["argv"] == hostile
        assert out["cwd"] == str(workdir)
        assert out["env"] == {k: v for k, v in env.items() if k != "COCKPIT_ECHO_ENV"}
        # and plain commands with the same hostile cwd and env through run()
        done = await t.run([PY, ECHO, *hostile], env=env, cwd=str(workdir), timeout=30)
        assert json.loads(done.stdout)["argv"] == hostile
        await t.close()
        ledger.tried("profiles", 2 * len(hostile))
    assert not canary.exists()
    assert not any(p.name == "CANARY" for p in tmp_path.rglob("CANARY"))


def test_a_hostile_python_path_is_never_run_by_a_shell(ssh_env, tmp_path: Path, ledger) -> None:
    canary = tmp_path / "CANARY"

    async def go() -> int:
        n = 0
        for t in (LocalTransport(), SSHTransport("gpu-box-1")):
            for v in (f"$(touch {canary})", f";touch {canary}", f"`touch {canary}`", f"python3; touch {canary}"):
                try:
                    done = await t.run([v, "-m", "sglang.launch_server"], timeout=20)
                    assert done.returncode != 0
                except TransportError as exc:
                    assert "not found" in str(exc) or "cannot start" in str(exc), str(exc)
                n += 1
            await t.close()
        return n

    n = asyncio.run(go())
    ledger.tried("profiles", n)
    assert not canary.exists()
    assert os.listdir(tmp_path) == []


async def test_a_program_name_with_an_equals_sign_is_a_command_not_an_assignment(ssh_env, tmp_path: Path, ledger) -> None:
    # With environment variables to pass, a first argv element like `X=1` must still be the
    # command (not found), as it is locally; never an assignment that promotes the next element.
    canary = tmp_path / "CANARY"
    argv = ["X=1", "sh", "-c", f"touch {canary}"]
    for t in (LocalTransport(), SSHTransport("gpu-box-1")):
        try:
            done = await t.run(argv, env={"A": "1"}, timeout=20)
            assert done.returncode != 0, (t.label, done)
        except TransportError as exc:
            assert "not found" in str(exc), str(exc)
        finally:
            await t.close()
        ledger.tried("profiles")
    assert not canary.exists(), "over SSH, `env` read X=1 as an assignment and ran the next element"
