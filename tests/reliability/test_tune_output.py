"""Issue 27: `cockpit tune`'s profile in a shared profiles directory.

A real tuning session (the story's simulator, two launches, a real bench) whose profile lives in a
directory every user may write (a shared project's `profiles/`, no sticky bit). Before it starts,
the other local user `nobody` plants `NAME.tuned.tmp` as a symbolic link to a file of the
operator's. The profile holds HF_TOKEN and an API key, and its name is 100 characters, the longest
a name may be.

Must hold: the link's target is untouched and the link is not renamed into NAME.tuned.yaml; the
tuned profile is a regular file of ours, 0600 (it holds the token), and it loads (`cockpit check`);
`tune --json` shows neither secret;
a second session refuses before any launch (exit 2, naming the file) instead of overwriting it.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import yaml

from tests.commands.test_tune import BENCH, cockpit, story_env
from tests.conftest import isolated_env
from tests.reliability._planted import as_other, shared_dir

TOKEN = "hf_tune_t0ken_d0_not_leak_3391"
KEY = "sk-tune-k3y-d0-not-leak-2207"
LONG = "t" * 100  # the longest name a profile may have


def test_tune_writes_its_profile_safely_in_a_shared_directory(tmp_path: Path, ledger) -> None:
    # the story profile and the simulated GPUs under tmp_path; its start-ups at 300 (the file is the test)
    story_env(tmp_path, 0.93, startup_speed="300")
    sim_dir = tmp_path / "gpus"
    with shared_dir() as shared:
        profiles = shared / "profiles"
        profiles.mkdir()
        os.chmod(profiles, 0o777)
        text = (tmp_path / "profiles" / "story.yaml").read_text().replace("name: story", f"name: {LONG}")
        text = text.replace("server:\n", f"server:\n  api-key: {KEY}\n")
        (profiles / f"{LONG}.yaml").write_text(text + f"env:\n  HF_TOKEN: {TOKEN}\n")
        victim = shared / "victim.txt"  # a file of the operator's
        victim.write_text("the operator's own file\n")
        planted = profiles / f"{LONG}.tuned.tmp"
        as_other("ln", "-s", str(victim), str(planted))
        ledger.fault("files")
        env = isolated_env(tmp_path, sim_dir)

        out = cockpit(env, shared, "tune", LONG, "--max-launches", "2", *BENCH, "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        r = json.loads(out.stdout)
        assert KEY not in out.stdout + out.stderr and TOKEN not in out.stdout + out.stderr  # `tune --json` masks
        assert victim.read_text() == "the operator's own file\n"  # not written through the link
        assert planted.is_symlink() and os.readlink(planted) == str(victim)  # left where it was, as it was
        tuned = Path(r["profile_written"])
        assert tuned == profiles / f"{LONG}.tuned.yaml", tuned
        st = tuned.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid(), st
        assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)  # it holds HF_TOKEN
        data = yaml.safe_load(tuned.read_text())
        assert data["server"]["api-key"] == KEY  # the profile keeps it: a launch needs it
        assert data["env"]["HF_TOKEN"] == TOKEN and data["name"].endswith("-tuned") and len(data["name"]) <= 100
        check = cockpit(env, shared, "check", str(tuned), "--json", timeout=60)
        assert check.returncode in (0, 1), check.stdout + check.stderr  # it loads (2 would be a bad profile)
        assert not [p for p in profiles.iterdir() if p.name.endswith(".tmp") and p != planted]  # no temp left

        # a second session: refused before it launches anything, the first one's profile kept
        before = tuned.read_bytes()
        runs_before = sorted((tmp_path / "runs").rglob("*"))
        t0 = time.monotonic()
        again = cockpit(env, shared, "tune", LONG, "--max-launches", "2", *BENCH)
        took = time.monotonic() - t0
        assert again.returncode == 2, again.stdout + again.stderr
        assert str(tuned) in again.stderr and "--output" in again.stderr and "Traceback" not in again.stderr
        assert tuned.read_bytes() == before
        assert sorted((tmp_path / "runs").rglob("*")) == runs_before  # nothing launched
        ledger.note(f"tune: planted NAME.tuned.tmp link untouched, profile 0600; second session refused in {took:.1f} s")
        ledger.fault("files")
        ledger.survive("files", 2)


# Issue 40, finding 6: secrets Cockpit's name rule cannot see (a token under a name that is no
# secret word, a password inside a URL, a webhook's address in `notify`)
PAT = "ghp_pat_0nly_the_owner_may_read_4471"
URL_PW = "pg-pa55w0rd-in-a-url-8812"
HOOK = "https://hooks.example.com/services/T0/B0/webhook-s3cret-5530"


def test_the_tuned_profile_is_no_more_readable_than_its_source(tmp_path: Path) -> None:
    """A 0600 profile whose secrets name-guessing misses: the tuned profile tune writes from it is
    0600 too (before: 0644, readable by every user of the machine)."""
    env = story_env(tmp_path, 0.93, startup_speed="300")
    src = tmp_path / "profiles" / "story.yaml"
    src.write_text(src.read_text() + f"env:\n  GH_PAT: {PAT}\n  DATABASE_URL: postgres://app:{URL_PW}@db:5432/app\n"
                   f"notify: [curl, -d, '@-', '{HOOK}']\n")
    os.chmod(src, 0o600)
    out = cockpit(env, tmp_path, "tune", "story", "--max-launches", "2", *BENCH, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    tuned = Path(json.loads(out.stdout)["profile_written"])
    text = tuned.read_text()
    assert PAT in text and URL_PW in text and HOOK in text  # the premise: the tuned profile carries them
    mode = stat.S_IMODE(tuned.lstat().st_mode)
    assert mode & ~stat.S_IMODE(src.stat().st_mode) == 0, f"{oct(mode)} from a 0600 profile"
