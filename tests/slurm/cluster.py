"""A real one-node Slurm cluster on loopback, reached through its own sshd as the login node.

A pytest plugin registered once by tests/conftest.py (`pytest_plugins`): every test of the suite that
asks for `slurm_cluster` shares the one cluster. Import the types from here, never the fixture.

`slurm_cluster` (session) -> SlurmCluster
    munged (private key and socket), slurmctld and slurmd (random free ports, private state,
    spool and log directories under a short /tmp directory: munge's socket path must stay under
    108 bytes), one node = this host (`hostname -s`, NodeAddr=127.0.0.1, CPUs = nproc), one
    partition `debug` (default) and a higher-tier `urgent` one on the same node whose jobs preempt
    (cancel) `debug` jobs: PREEMPTED is a real state here. No accounting storage (`sacct` answers "Slurm accounting storage is
    disabled"), so the no-accounting path is the one exercised: `squeue`, `scontrol show job` and
    the job-completion file (JobCompType=jobcomp/filetxt).

    The login node is a third sshd (alias `slurm-login` in the ssh_home fixture's ~/.ssh/config)
    whose sshd_config has `SetEnv SLURM_CONF=<our slurm.conf> SHLVL=1`: every SSH session sees the
    cluster's config the way a real login node's /etc/profile.d would set it, without touching
    /etc/slurm or root's dotfiles (SHLVL=1 makes bash skip ~/.bashrc: see `_Sshd.setenv` in tests/conftest.py). Jobs
    inherit it (sbatch exports the submitting environment).

    Fields: conf (Path), env (dict: os.environ + SLURM_CONF, for running slurm commands here),
    alias ("slurm-login"), node (the node name), cpus, root (Path), jobcomp (Path).
    Methods: kill_login_connections() drops every SSH link to the login node; run(*argv) runs a slurm command here with SLURM_CONF; cancel_all() scancels every
    job (between tests); fill() / release() occupy every CPU with a held-back sleeper job so the
    next submission stays PENDING (Resources); fail_node() marks the node DOWN (running
    jobs end NODE_FAIL) and waits until it is idle again.

If slurmctld, slurmd or munged are missing the fixture FAILS (never skips): `scripts/test.sh`
installs slurm-wlm and munge.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import SshHome, _Sshd, free_port

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
MUNGED = "/usr/sbin/munged"
LOGIN_ALIAS = "slurm-login"


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    env: dict[str, str]
    node: str
    cpus: int
    jobcomp: Path
    alias: str = LOGIN_ALIAS
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    login: _Sshd | None = field(default=None, repr=False)

    def kill_login_connections(self) -> int:
        """Drop every SSH connection to the login node (clients see EOF)."""
        assert self.login is not None
        return self.login.kill_connections()

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    def job_ids(self) -> list[str]:
        out = self.run("squeue", "-h", "-o", "%i").stdout
        return out.split()

    def cancel_all(self, timeout: float = 30) -> None:
        ids = self.job_ids()
        if ids:
            self.run("scancel", *ids, check=False)
        deadline = time.monotonic() + timeout
        while self.job_ids() and time.monotonic() < deadline:
            time.sleep(0.2)

    def fill(self) -> str:
        """A job holding every CPU of the node: the next one waits (PENDING, reason Resources)."""
        out = self.run("sbatch", "--parsable", f"--cpus-per-task={self.cpus}", "-J", "cockpit-filler",
                       "-o", "/dev/null", "--wrap", "sleep 600").stdout.strip()
        job = out.split(";")[0]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st = self.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
            if st == "RUNNING":
                return job
            time.sleep(0.1)
        raise RuntimeError(f"the filler job {job} did not start: {st!r}")

    def release(self, job: str) -> None:
        self.run("scancel", job, check=False)

    def fail_node(self) -> None:
        """Mark the node DOWN (its running jobs end NODE_FAIL), then bring it back to idle."""
        self.run("scontrol", "update", f"NodeName={self.node}", "State=DOWN", "Reason=cockpit-test")
        # ReturnToService=2 and a live slurmd bring it back by themselves; RESUME when they do not
        self.run("scontrol", "update", f"NodeName={self.node}", "State=RESUME", check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if set(self.run("sinfo", "-h", "-N", "-o", "%t").stdout.split()) == {"idle"}:
                return
            time.sleep(0.2)
        raise RuntimeError("the node did not come back after DOWN")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()


def _require_slurm() -> None:
    missing = [p for p in (SLURMCTLD, SLURMD, MUNGED) if not os.path.exists(p)]
    missing += [c for c in ("sbatch", "squeue", "scontrol", "scancel", "srun") if shutil.which(c) is None]
    if missing:
        pytest.fail(
            f"missing {', '.join(missing)}: the Slurm tests need a real slurmctld/slurmd and munge. "
            "`scripts/test.sh` installs them (apt-get install -y slurm-wlm munge).",
            pytrace=False,
        )


def _wait(cond, what: str, timeout: float, log: Path | None = None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    raise RuntimeError(f"{what} after {timeout} s\n{tail}")


def _port_pair() -> tuple[int, int]:
    a = free_port()
    b = free_port()
    while b == a:
        b = free_port()
    return a, b


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    logf = open(log, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                start_new_session=True)
    finally:
        logf.close()


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def slurm_cluster(ssh_home: SshHome) -> Iterator[SlurmCluster]:
    _require_slurm()
    # a second cluster in one session would append a second `Host slurm-login` to the shared ssh
    # config, and ssh reads the first: the tests would submit to one cluster and fill another
    if f"Host {LOGIN_ALIAS}\n" in ssh_home.ssh_config.read_text():
        raise RuntimeError("a second Slurm cluster in one test session: request the `slurm_cluster` fixture "
                           "(registered once by tests/conftest.py), never import it into a module")
    # short: munge's socket path must fit a sockaddr_un
    root = Path(tempfile.mkdtemp(prefix="ckslurm-", dir="/tmp"))
    for d in ("munge", "state", "spool", "log"):
        (root / d).mkdir()
    os.chmod(root / "munge", 0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = root / "munge" / "sock"
    node = socket.gethostname().split(".")[0]
    user = getpass.getuser()  # root in CI; a non-root slurmd can still run its own user's jobs
    cpus = os.cpu_count() or 1
    cluster = SlurmCluster(root=root, conf=root / "slurm.conf", env={}, node=node, cpus=cpus,
                           jobcomp=root / "jobcomp.txt")
    login: _Sshd | None = None
    try:
        cluster.procs.append(_start(
            [MUNGED, "-F", "-f", f"--key-file={key}", f"--socket={sock}", f"--pid-file={root}/munge/pid",
             f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge/seed"],
            dict(os.environ), root / "log" / "munged.out"))
        _wait(sock.exists, "munged did not open its socket", 10, root / "log" / "munged.log")
        for attempt in range(5):
            ctld_port, d_port = _port_pair()
            cluster.conf.write_text(textwrap.dedent(f"""\
                ClusterName=cockpittest
                SlurmctldHost={node}(127.0.0.1)
                SlurmctldPort={ctld_port}
                SlurmdPort={d_port}
                AuthType=auth/munge
                AuthInfo=socket={sock}
                CredType=cred/munge
                SlurmUser={user}
                SlurmdUser={user}
                StateSaveLocation={root}/state
                SlurmdSpoolDir={root}/spool
                SlurmctldPidFile={root}/ctld.pid
                SlurmdPidFile={root}/d.pid
                SlurmctldLogFile={root}/log/ctld.log
                SlurmdLogFile={root}/log/d.log
                ProctrackType=proctrack/linuxproc
                TaskPlugin=task/none
                JobAcctGatherType=jobacct_gather/none
                AccountingStorageType=accounting_storage/none
                JobCompType=jobcomp/filetxt
                JobCompLoc={cluster.jobcomp}
                SchedulerType=sched/backfill
                SelectType=select/cons_tres
                SelectTypeParameters=CR_Core
                ReturnToService=2
                MpiDefault=none
                MinJobAge=600
                KillWait=5
                NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
                PreemptType=preempt/partition_prio
                PreemptMode=CANCEL
                PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
                PartitionName=urgent Nodes={node} MaxTime=INFINITE State=UP PriorityTier=2
                """))
            cluster.env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
            ctld = _start([SLURMCTLD, "-D", "-c", "-i"], cluster.env, root / "log" / "ctld.out")
            cluster.procs.append(ctld)
            try:
                _wait(lambda p=ctld_port, c=ctld: _listening(p) or c.poll() is not None, "slurmctld did not listen", 20,
                      root / "log" / "ctld.log")
            except RuntimeError:
                if attempt == 4:
                    raise
            if ctld.poll() is None:
                break
            cluster.procs.remove(ctld)  # port taken between picking and binding: try others
        slurmd = _start([SLURMD, "-D"], cluster.env, root / "log" / "d.out")
        cluster.procs.append(slurmd)

        def node_idle() -> bool:
            out = cluster.run("sinfo", "-h", "-N", "-o", "%t", check=False).stdout.strip()
            return set(out.split()) == {"idle"}  # one line per partition

        _wait(node_idle, "the node did not become idle", 30, root / "log" / "d.log")

        # the login node: an sshd whose sessions see SLURM_CONF
        authorized = ssh_home.home.parent / "authorized_keys"
        login = _Sshd(root, "login", authorized)
        # every session sees the cluster's config, as a login node's /etc/profile.d would set it
        # (SHLVL=1 stays: see _Sshd.setenv)
        login.setenv["SLURM_CONF"] = str(cluster.conf)
        login.start_on_free_port()
        cluster.login = login
        with open(ssh_home.known_hosts, "a") as f:
            f.write(f"[127.0.0.1]:{login.port} ssh-ed25519 {login.host_key_b64}\n")
        with open(ssh_home.ssh_config, "a") as f:
            f.write(f"\nHost {LOGIN_ALIAS}\n  HostName 127.0.0.1\n  Port {login.port}\n  User {ssh_home.user}\n"
                    f"  IdentityFile {ssh_home.user_key}\n  IdentitiesOnly yes\n  BatchMode yes\n"
                    f"  ConnectTimeout 5\n  UserKnownHostsFile {ssh_home.known_hosts}\n")
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.cancel_all(timeout=15)
        if login is not None:
            login.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
