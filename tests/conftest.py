"""Shared session fixtures: a real sshd on loopback, a fake nvidia-smi, a simulated-GPU directory.

Nothing here is a mock of something that can run on this machine: the SSH tests talk to a real
OpenSSH server, the agent runs as a real process. Only the GPU is a stand-in.

Fixtures (import nothing; pytest finds them by name):

`ssh_home` (session) -> SshHome
    Two real sshd processes on 127.0.0.1 (random free ports) and a temporary HOME whose
    ~/.ssh holds a user key (ed25519, no passphrase), `config` and `known_hosts` with both host keys.
    Host aliases in ~/.ssh/config:
        gpu-box-1     -> 127.0.0.1:<port>       (the main sshd)
        gpu-box-2     -> 127.0.0.1:<jump_port>  (the second sshd, reached directly)
        jump          -> 127.0.0.1:<jump_port>  (same server, used as a ProxyJump host)
        via-jump      -> 127.0.0.1:<port> with `ProxyJump jump`
        unknown-key   -> 127.0.0.1:<port>, known_hosts file that does not hold its key
        changed-key   -> 127.0.0.1:<port>, known_hosts file with a different key for it
        dead-jump     -> 127.0.0.1:<port> with ProxyJump through a port nobody listens on
    Fields: home (Path), env (dict: HOME, PATH, USER; pass to subprocesses), user, port,
    jump_port, aliases (tuple), user_key (Path), known_hosts (Path), ssh_config (Path), log (Path).
    Methods: restart() restarts the main sshd on the same port; kill_connections() kills the
    per-connection sshd children of the main sshd (a dropped link: clients see EOF);
    ssh_argv(alias, *cmd) an OpenSSH client argv using this HOME's config.
    Tests that run asyncssh in-process must point HOME at it: use the `ssh_env` fixture
    (function scope, monkeypatches HOME) rather than ssh_home directly.

`sshd`  (session) -> the same SshHome (alias kept for readability: `def test_x(sshd): ...`).
`jump_sshd` (session) -> int: the second sshd's port.
`ssh_env` (function) -> SshHome, with HOME (and USER) monkeypatched for in-process asyncssh.

`fake_nvidia_smi` (function) -> FakeNvidiaSmi: `.dir` holds an executable `nvidia-smi`;
    `.use(variant)` rewrites it: "ok" (2 GPUs, 2 compute apps), "na" ([N/A] / [Not Supported]
    fields), "hang" (sleeps forever), "fail" (exit 9, "NVIDIA-SMI has failed ..."). `.path_env`
    is a PATH with the directory first. Default variant: "ok".
    The "ok" CSV: GPU 0 = 81559 MiB total, 40000 used, util 97, 61 C, 312.5 W; GPU 1 = 1024 used.

`sim_gpu_dir` (function) -> Path: an empty directory for the simulator's GPU state; set it as
    COCKPIT_SIM_GPU_DIR (or pass --sim-dir) in the process under test.

`both_counts` (function, parametrized "simd" / "python") -> str: runs the test once with the bulk
    scanners' SIMD count (stringzilla) and once with `bytes.count` (the path of a platform with no
    wheel). Use it as `pytestmark = pytest.mark.usefixtures("both_counts")`.

If /usr/sbin/sshd is missing the SSH fixtures FAIL (never skip): `.ci/run` installs openssh-server.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import random
import shutil
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# The real Slurm cluster is ONE session fixture for the whole suite, registered here once: a module
# that imports the fixture function gets a cluster of its own (three ran at once in CI, and every
# `ssh slurm-login` reached the first one while `fill()` filled the last).
pytest_plugins = ("tests.slurm.cluster",)

SSHD = "/usr/sbin/sshd"


def _port_slice() -> range | None:
    """This process's share of the ports below the kernel's ephemeral range, or None.

    A port picked free is bound later by the process under test (sshd, the simulator, a server);
    meanwhile an outgoing connection of anything on the machine may take it as its source port
    when it lies in the ephemeral range, and a second xdist worker may pick it too. Below that
    range no outgoing connection takes a port, and each worker (`PYTEST_XDIST_WORKER` gw0, gw1,
    ...) picks in a slice of its own; a process outside xdist takes the slice past the workers'."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    first, size = 10000, 2000
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else -1
    slots = (low - first) // size
    if slots < 2:
        return None
    slot = slots - 1 if index < 0 else index % (slots - 1)
    return range(first + slot * size, first + (slot + 1) * size)


_unhanded: list[int] = []
_reserved: set[int] = set()  # handed out for good: a port that must stay unanswered (dead-jump's)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (see `_port_slice` for where it is
    picked; the kernel's pick where the machine's port ranges leave no room). The slice is handed
    out in a random order, each port once before any comes again: two ports asked for in a row
    (a prefill and a decode group) are never the same."""
    ports = _port_slice()
    if ports is not None:
        for _ in range(100):
            if not _unhanded:
                _unhanded.extend(random.sample(ports, len(ports)))
            port = _unhanded.pop()
            if port in _reserved:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def isolated_env(root: Path, sim_dir: Path, *, home: Path | None = None) -> dict[str, str]:
    """The environment of a `cockpit` subprocess under `root`: its own HOME, XDG folders, runs and
    simulated GPUs, the checkout on PYTHONPATH, no SSH agent — nothing shared with the operator's
    (a `cockpit demo` beside the suite) or another test's."""
    env = dict(os.environ)
    env.update({
        "HOME": str(home or root), "XDG_CONFIG_HOME": str(root / "xc"), "XDG_DATA_HOME": str(root / "xd"),
        "XDG_CACHE_HOME": str(root / "xk"), "COCKPIT_RUNS_ROOT": str(root / "runs"),
        "COCKPIT_SIM_GPU_DIR": str(sim_dir), "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    })
    env.pop("SSH_AUTH_SOCK", None)
    return env


def wait_for_port(port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", port))
                return
            except OSError:
                time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout} s")


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path.with_suffix(".pub").read_text().split()[1]


class _Sshd:
    """One sshd listening on 127.0.0.1:port, restartable on the same port."""

    def __init__(self, root: Path, name: str, authorized_keys: Path):
        self.root = root
        self.name = name
        self.port = 0
        self.authorized_keys = authorized_keys
        self.host_key = root / f"{name}_host_ed25519"
        self.host_key_b64 = _keygen(self.host_key, f"{name}-host")
        self.config = root / f"{name}_sshd_config"
        self.log = root / f"{name}.log"
        self.pidfile = root / f"{name}.pid"
        self.proc: subprocess.Popen[bytes] | None = None
        # sshd's SetEnv for every session; sshd honours only the first SetEnv line, so a fixture
        # that needs more (the Slurm login node's SLURM_CONF) adds to this dict before starting.
        # SHLVL=1: bash started by sshd skips ~/.bashrc when SHLVL is already >= 1. The machine's
        # own rc is not part of what the tests exercise, and it costs: this dev machine's runs
        # `pyenv rehash` (~0.1 s a session), whose lock goes stale when a test kills a session
        # mid-rc, and then every SSH session waits 60 s.
        self.setenv: dict[str, str] = {"SHLVL": "1"}
        self.extra_config = ""  # more sshd_config lines (a test's own server: MaxSessions 2)

    def start_on_free_port(self, attempts: int = 5) -> None:
        # Several pytest sessions may run at once: a port picked free can be taken before sshd
        # binds it. Try a few.
        for i in range(attempts):
            self.port = free_port()
            self._write_config()
            try:
                self.start()
                return
            except RuntimeError:
                self.stop()
                if i == attempts - 1:
                    raise

    def _write_config(self) -> None:
        authorized_keys = self.authorized_keys
        self.config.write_text(
            textwrap.dedent(
                f"""\
                Port {self.port}
                ListenAddress 127.0.0.1
                HostKey {self.host_key}
                PidFile {self.pidfile}
                AuthorizedKeysFile {authorized_keys}
                PubkeyAuthentication yes
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                PermitRootLogin prohibit-password
                StrictModes no
                UsePAM no
                AllowTcpForwarding yes
                PermitTunnel no
                X11Forwarding no
                PrintMotd no
                ClientAliveInterval 0
                MaxStartups 100:30:200
                LogLevel VERBOSE
                Subsystem sftp internal-sftp
                SetEnv {" ".join(f"{k}={v}" for k, v in self.setenv.items())}
                """
            )
            + self.extra_config
        )

    def start(self) -> None:
        if os.geteuid() == 0:
            # Privilege separation directory; a fresh container may not have it.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        logf = open(self.log, "ab")  # noqa: SIM115 - handed to the child, closed by us right after
        try:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                start_new_session=True,
            )
        finally:
            logf.close()
        try:
            wait_for_port(self.port, proc=self.proc)
            # If another process held the port, our sshd fails to bind and exits right away.
            time.sleep(0.15)
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode} (port {self.port} taken?)")
        except RuntimeError as exc:
            raise RuntimeError(
                f"sshd {self.name} did not start: {exc}\n{self.log.read_text()[-3000:]}"
            ) from None

    def children(self) -> list[int]:
        if self.proc is None:
            return []
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def kill_connections(self) -> int:
        """Kill every per-connection child: clients see their connection drop."""
        pids = self.children()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # Wait until they are really gone, so the next connect meets a clean listener.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(p in self.children() for p in pids):
            time.sleep(0.05)
        return len(pids)

    def stop(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        for pid in self._descendants(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def _descendants(self, pid: int) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
        kids = [int(p) for p in out.stdout.split()]
        result = list(kids)
        for k in kids:
            result.extend(self._descendants(k))
        return result

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclass
class SshHome:
    home: Path
    env: dict[str, str]
    user: str
    port: int
    jump_port: int
    user_key: Path
    known_hosts: Path
    ssh_config: Path
    log: Path
    aliases: tuple[str, ...] = ()
    _main: _Sshd | None = field(default=None, repr=False)
    _jump: _Sshd | None = field(default=None, repr=False)

    def restart(self) -> None:
        assert self._main is not None
        self._main.restart()

    def stop(self) -> None:
        """Stop the main sshd (connections refused) until `start`; a test that stops it starts it
        again in a `finally`: the server is shared by the session."""
        assert self._main is not None
        self._main.stop()

    def start(self) -> None:
        assert self._main is not None
        self._main.start()

    def kill_connections(self) -> int:
        assert self._main is not None
        return self._main.kill_connections()

    def ssh_argv(self, alias: str, *cmd: str) -> list[str]:
        return ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", alias, *cmd]

    @property
    def host_key_b64(self) -> str:
        assert self._main is not None
        return self._main.host_key_b64


def _require_sshd() -> None:
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        pytest.fail(
            f"{SSHD} or ssh-keygen is missing: the SSH tests need a real OpenSSH server. "
            "`.ci/run` installs openssh-server (apt-get install -y openssh-server openssh-client).",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def ssh_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHome]:
    _require_sshd()
    root = tmp_path_factory.mktemp("sshd")
    home = root / "home"
    dot_ssh = home / ".ssh"
    dot_ssh.mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(dot_ssh, 0o700)
    user = getpass.getuser()

    user_key = dot_ssh / "id_ed25519"
    _keygen(user_key, "cockpit-tests")
    authorized = root / "authorized_keys"
    authorized.write_text(user_key.with_suffix(".pub").read_text())
    os.chmod(authorized, 0o600)

    main = _Sshd(root, "main", authorized)
    jump = _Sshd(root, "jump", authorized)
    main.start_on_free_port()
    try:
        jump.start_on_free_port()
    except BaseException:
        main.stop()
        raise
    dead_port = free_port()
    # nothing may ever listen there: not handed out again when the slice comes round (a later
    # test's sshd there would answer dead-jump's ProxyJump: "no run found on dead-jump", seen once)
    _reserved.add(dead_port)

    known_hosts = dot_ssh / "known_hosts"
    known_hosts.write_text(
        f"[127.0.0.1]:{main.port} ssh-ed25519 {main.host_key_b64}\n"
        f"[127.0.0.1]:{jump.port} ssh-ed25519 {jump.host_key_b64}\n"
    )
    empty_known = dot_ssh / "known_hosts.empty"
    empty_known.write_text("")
    # A known_hosts that pins a different key for the main server: the "key changed" case.
    other_key = root / "other_host_ed25519"
    other_b64 = _keygen(other_key, "someone-else")
    changed_known = dot_ssh / "known_hosts.changed"
    changed_known.write_text(f"[127.0.0.1]:{main.port} ssh-ed25519 {other_b64}\n")

    common = textwrap.dedent(
        f"""\
          User {user}
          IdentityFile {user_key}
          IdentitiesOnly yes
          BatchMode yes
          ConnectTimeout 5
        """
    )
    config = dot_ssh / "config"
    config.write_text(
        f"Host gpu-box-1\n  HostName 127.0.0.1\n  Port {main.port}\n{common}"
        f"  UserKnownHostsFile {known_hosts}\n\n"
        f"Host gpu-box-2 jump\n  HostName 127.0.0.1\n  Port {jump.port}\n{common}"
        f"  UserKnownHostsFile {known_hosts}\n\n"
        f"Host via-jump\n  HostName 127.0.0.1\n  Port {main.port}\n  ProxyJump jump\n{common}"
        f"  UserKnownHostsFile {known_hosts}\n\n"
        f"Host unknown-key\n  HostName 127.0.0.1\n  Port {main.port}\n{common}"
        f"  UserKnownHostsFile {empty_known}\n\n"
        f"Host changed-key\n  HostName 127.0.0.1\n  Port {main.port}\n{common}"
        f"  UserKnownHostsFile {changed_known}\n\n"
        f"Host dead-jump\n  HostName 127.0.0.1\n  Port {main.port}\n  ProxyJump {user}@127.0.0.1:{dead_port}\n{common}"
        f"  UserKnownHostsFile {known_hosts}\n"
    )
    os.chmod(config, 0o600)

    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "USER": user,
        "LANG": "C.UTF-8",
    }
    result = SshHome(
        home=home,
        env=env,
        user=user,
        port=main.port,
        jump_port=jump.port,
        user_key=user_key,
        known_hosts=known_hosts,
        ssh_config=config,
        log=main.log,
        aliases=("gpu-box-1", "gpu-box-2", "jump", "via-jump", "unknown-key", "changed-key", "dead-jump"),
        _main=main,
        _jump=jump,
    )
    try:
        yield result
    finally:
        main.stop()
        jump.stop()


@pytest.fixture(scope="session")
def sshd(ssh_home: SshHome) -> SshHome:
    return ssh_home


@pytest.fixture(scope="session")
def jump_sshd(ssh_home: SshHome) -> int:
    return ssh_home.jump_port


@pytest.fixture
def ssh_env(ssh_home: SshHome, monkeypatch: pytest.MonkeyPatch) -> SshHome:
    monkeypatch.setenv("HOME", str(ssh_home.home))
    monkeypatch.setenv("USER", ssh_home.user)
    # An agent of the developer's own must not offer keys the test server doesn't know.
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return ssh_home


# ---------------------------------------------------------------- fake GPU

_SMI_OK_GPUS = (
    "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, 40000, 81559, 97, 61, 312.50\n"
    "1, GPU-bbbbbbbb-1111-1111-1111-111111111111, NVIDIA H100 80GB HBM3, 1024, 81559, 0, 35, 70.10\n"
)
_SMI_OK_APPS = (
    "4242, GPU-aaaaaaaa-0000-0000-0000-000000000000, 39000\n"
    "5151, GPU-bbbbbbbb-1111-1111-1111-111111111111, 512\n"
)
_SMI_NA_GPUS = "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, 40000, 81559, [N/A], [Not Supported], [N/A]\n"
_SMI_NA_APPS = "4242, GPU-aaaaaaaa-0000-0000-0000-000000000000, [N/A]\n"


def _smi_script(gpus: str, apps: str, *, hang: bool = False, fail: bool = False) -> str:
    if hang:
        body = "import time\ntime.sleep(3600)\n"
    elif fail:
        body = (
            "sys.stdout.write('NVIDIA-SMI has failed because it couldn\\'t communicate with the NVIDIA driver.\\n')\n"
            "sys.exit(9)\n"
        )
    else:
        body = (
            "args = ' '.join(sys.argv[1:])\n"
            f"if '--query-compute-apps' in args:\n    sys.stdout.write({apps!r})\n"
            f"elif '--query-gpu' in args:\n    sys.stdout.write({gpus!r})\n"
            "else:\n    sys.stdout.write('fake nvidia-smi\\n')\n"
        )
    return f"#!/usr/bin/env python3\nimport sys\n{body}"


@dataclass
class FakeNvidiaSmi:
    dir: Path
    path_env: str

    def use(self, variant: str) -> None:
        scripts = {
            "ok": _smi_script(_SMI_OK_GPUS, _SMI_OK_APPS),
            "na": _smi_script(_SMI_NA_GPUS, _SMI_NA_APPS),
            "hang": _smi_script("", "", hang=True),
            "fail": _smi_script("", "", fail=True),
        }
        target = self.dir / "nvidia-smi"
        target.write_text(scripts[variant])
        target.chmod(0o755)


@pytest.fixture(params=["simd", "python"])
def both_counts(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    from cockpit.core import bytecount

    if request.param == "simd":
        assert bytecount.is_fast(), "stringzilla is a declared dependency: the SIMD count must load"
    else:
        # forked parse workers inherit the variable; this process reads the patched function
        monkeypatch.setenv("COCKPIT_BYTECOUNT", "python")
        monkeypatch.setattr(bytecount, "counter", lambda: bytecount._bytes_count)
        monkeypatch.setattr(bytecount, "first_of", lambda: bytecount._bytes_first_of)
    return str(request.param)


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path) -> FakeNvidiaSmi:
    d = tmp_path / "fake-bin"
    d.mkdir()
    fake = FakeNvidiaSmi(dir=d, path_env=f"{d}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    fake.use("ok")
    return fake


@pytest.fixture
def sim_gpu_dir(tmp_path: Path) -> Path:
    d = tmp_path / "sim-gpus"
    d.mkdir()
    return d


_RUN_ENV_KEYS = (b"COCKPIT_RUNS_ROOT=", b"COCKPIT_SIM_GPU_DIR=", b"COCKPIT_RUN_DIR=")


def _processes_of(root: str) -> list[int]:
    """Pids whose environment places them under `root` (servers a test launched, detached)."""
    prefix = root.encode()
    pids: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(k) and v[len(k):].startswith(prefix) for v in env for k in _RUN_ENV_KEYS):
            pids.append(int(name))
    return pids


@pytest.fixture(autouse=True)
def _reap_servers_left_by_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that fails or times out before its own `down` leaves detached servers (and their
    simulated GPUs) running; they would load the machine for the rest of the suite and outlive it.
    After every test that used tmp_path, anything launched under it is killed."""
    root = str(request.getfixturevalue("tmp_path")) if "tmp_path" in request.fixturenames else None
    yield
    if root is None:
        return
    for pid in _processes_of(root):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- pytest-xdist: who runs beside whom

# `scripts/test.sh` runs the suite on xdist workers with `--dist loadgroup`. Two tests that drive
# heavy real parts at once (a tmux story, a tune story, the Slurm cluster, a real vLLM, an SSH or
# server fault with its timeouts and kills) must never share the 2 cores with each other: they go
# to ONE group, "serial", that one worker runs from start to end while the others take the light
# tests. docs/TESTING.md ("Workers") has the rule and the measurements it rests on.
SERIAL_GROUP = "serial"
# the real engines are a chain of their own on another worker (docs/TESTING.md, "Workers"): one
# engine at a time is the machine-wide engine lock's job, and the serial stories beside them cost
# less than the 20-odd minutes the two chains took end to end
ENGINE_GROUP = "engines"
ENGINE_PATHS = ("real_engine/",)
# real-engine modules that start no server (they read the installed engines' argument parsers and
# kernels, under no engine lock): off the engines' chain, the suite's critical path, onto the serial one
ENGINE_FREE = ("real_engine/test_flags_vllm.py", "real_engine/test_sglang_flags.py",
               "real_engine/test_sglang_kernel_stand_in.py")
# by path under tests/ (a folder ends in "/"): what the junit times of a whole run and the fixtures
# show to be heavy real-stack stories
SERIAL_PATHS = (
    "slurm/",                                  # the one Slurm cluster (and the tests beside it)
    "ui/test_tmux_e2e.py", "ui/test_tmux_e2e_vllm.py",   # tmux end-to-end stories
    "ui/test_flows.py", "ui/test_flows_vllm.py", "ui/test_flows_crashed_profile.py",  # flow stories
    "ui/test_restart_gate.py",                 # restart-through-the-gate stories: 5 simulated runs in the TUI
    "commands/test_tune.py", "commands/test_tune_vllm.py", "reliability/test_tune_output.py",  # tune stories
    # fault injection with timeouts and kills under test
    "reliability/test_ssh_faults.py", "reliability/test_ssh_hardening.py",
    "reliability/test_cockpit_killed.py", "reliability/test_server_faults.py",
    "reliability/test_run_dir_faults.py", "reliability/test_bench_hostile_server.py",
    "reliability/test_telemetry_faults.py",
    # measured under xdist (docs/TESTING.md, "Workers"): the bench's agreement with the server's
    # own counters at speed 1 missed its 5 % beside the serial group (3,041 vs 2,874); the argv
    # audit reads every process of the machine and found the other parametrization's server
    "commands/test_bench.py", "reliability/test_argv_audit.py",
    # reads every process of the machine for the key as well: its [local] and [ssh] runs saw each
    # other's writer on two workers (the integrator's run of 21e6000)
    "reliability/test_secrets_private.py",
)
# single tests: a flake seen under xdist that is not understood well enough to fix here (the brief's
# rule: into the serial group, and said so in docs/TESTING.md)
SERIAL_TESTS = frozenset({
    # sshd refused a session ("open failed") once under xdist, and once in 24 runs alone, unloaded:
    # not load; see docs/TESTING.md
    "transport/test_ssh.py::test_many_commands_share_one_connection_within_max_sessions",
})
# by fixture, wherever the test lives: the Slurm cluster is one per session, so every test that
# uses it is in the one group (one worker starts it)
SERIAL_FIXTURES = frozenset({"slurm_cluster"})
_TESTS = Path(__file__).resolve().parent


def xdist_group_of(item: pytest.Item) -> str | None:
    """The xdist group of a test: "engines" for the real engines, "serial" for the other heavy
    real-stack ones, "module:<path>" for a
    light test whose module shares a module- or class-scoped fixture (a server started once per
    module must not start again on every worker), None (any worker) for the rest."""
    rel = Path(str(item.fspath)).resolve().relative_to(_TESTS).as_posix()
    if rel in ENGINE_FREE:
        return SERIAL_GROUP
    if any(rel.startswith(p) for p in ENGINE_PATHS):
        return ENGINE_GROUP
    if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in SERIAL_PATHS):
        return SERIAL_GROUP
    if f"{rel}::{item.name}" in SERIAL_TESTS:
        return SERIAL_GROUP
    if SERIAL_FIXTURES.intersection(item.fixturenames):
        return SERIAL_GROUP
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        if defs and defs[-1].scope in ("module", "class", "package"):
            return f"module:{rel}"
    return None


def _dispatch_order(groups: list[str | None]) -> list[tuple[int, int]]:
    """Each test's place in the queue xdist hands out (scripts/test.sh passes
    `--no-loadscope-reorder`, so the queue is the collection order this sets): the two long chains
    first, the real engines (the longest) then the serial stories, each on a worker of its own from
    the start; then the module groups, largest first; the single tests last, which pack the
    workers' ends. (xdist's own reorder, by test count, put the ~50-test engine chain behind every
    larger module group: minutes late on the suite's critical path.)"""
    size: dict[str | None, int] = {}
    for g in groups:
        size[g] = size.get(g, 0) + 1

    def rank(g: str | None) -> int:
        if g is None:
            return 3
        return {ENGINE_GROUP: 0, SERIAL_GROUP: 1}.get(g, 2)

    return [(rank(g), -size[g] if g is not None else 0) for g in groups]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: xdist reads the mark in its own hook of the same name
    if not config.pluginmanager.hasplugin("xdist"):
        return
    groups = [xdist_group_of(item) for item in items]
    for item, group in zip(items, groups, strict=True):
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # stable: within a group the collection order (a module's tests in their order) is kept
    order = dict(zip(map(id, items), _dispatch_order(groups), strict=True))
    items.sort(key=lambda it: order[id(it)])


# COCKPIT_TEST_TIMELINE=FILE: every test's start, end, worker and id appended to FILE (one line a
# test, tab-separated), to see the suite's critical path (docs/TESTING.md, "Workers")
_TIMELINE = os.environ.get("COCKPIT_TEST_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    t0 = time.time()
    yield
    if _TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(_TIMELINE, "a", encoding="utf-8") as f:
            f.write(f"{t0:.3f}\t{time.time():.3f}\t{worker}\t{xdist_group_of(item) or '-'}\t{item.nodeid}\n")


# ---------------------------------------------------------------- the reliability ledger across workers

def _ledger_dict(config: pytest.Config) -> dict[str, object] | None:
    led = getattr(config, "_reliability_ledger", None)
    if led is None:
        return None
    return {"injected": dict(led.injected), "survived": dict(led.survived), "inputs": dict(led.inputs),
            "lines_compared": led.lines_compared, "lines_lost": led.lines_lost,
            "lines_repeated": led.lines_repeated, "notes": list(led.notes)}


class _LedgerFromWorkers:
    """On the xdist controller: each worker's reliability ledger (tests/reliability/conftest.py, a
    session fixture, so one per worker) is added into the controller's, which the summary prints."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_testnodedown(self, node, error) -> None:  # type: ignore[no-untyped-def]
        got = getattr(node, "workeroutput", {}).get("reliability_ledger")
        if got is None:
            return
        from tests.reliability.conftest import _ledger

        led = _ledger(self.config)
        for area in ("injected", "survived", "inputs"):
            mine = getattr(led, area)
            for k, v in got[area].items():
                mine[k] += v
        led.lines_compared += got["lines_compared"]
        led.lines_lost += got["lines_lost"]
        led.lines_repeated += got["lines_repeated"]
        led.notes.extend(got["notes"])


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_LedgerFromWorkers(config), "cockpit-ledger-from-workers")


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    led = _ledger_dict(session.config)
    if workeroutput is not None and led is not None:
        workeroutput["reliability_ledger"] = led


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    # here, not in tests/reliability/conftest.py: under xdist the controller never loads that one
    from tests.reliability.conftest import print_summary

    print_summary(terminalreporter, config)
