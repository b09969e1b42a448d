#!/usr/bin/env bash
# Installs what the tests need (system packages, a venv with the test extras), runs the whole
# suite, then the static checks: `ruff check .`, `mypy` and `lint-imports` (the layers contracts in
# pyproject.toml). Every step runs; the script fails when any of them fails. Safe to run
# repeatedly; on a fresh Debian/Ubuntu machine it installs openssh-server, tmux, slurm-wlm and munge.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
[ -x /usr/sbin/sshd ] || need_pkgs+=(openssh-server)
command -v tmux >/dev/null 2>&1 || need_pkgs+=(tmux)
command -v ssh-keygen >/dev/null 2>&1 || need_pkgs+=(openssh-client)
# a real one-node Slurm cluster for tests/slurm (slurmctld + slurmd + munged on loopback)
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null 2>&1 || need_pkgs+=(slurm-wlm)
[ -x /usr/sbin/munged ] || need_pkgs+=(munge)
# the kernel's record of the run-file writer's fsyncs (tests/reliability/test_run_files_durable.py)
command -v strace >/dev/null 2>&1 || need_pkgs+=(strace)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e ".[test]"

export PATH="$PWD/.venv/bin:$PATH"
failed=()
# the real-engine tier's vLLM (CPU build) in its own cached venv; a failed install is reported
# here and again by every real-engine test (they fail, never skip)
if COCKPIT_REAL_ENGINE_VENV=$(bash scripts/real-engine.sh); then
  export COCKPIT_REAL_ENGINE_VENV
else
  failed+=("scripts/real-engine.sh (the real engine did not install)")
fi
# and SGLang's own engine (its CPU path) in another, the same way
if COCKPIT_REAL_SGLANG_VENV=$(bash scripts/real-engine.sh sglang); then
  export COCKPIT_REAL_SGLANG_VENV
else
  failed+=("scripts/real-engine.sh sglang (SGLang did not install)")
fi
# pytest-xdist workers (docs/TESTING.md, "Workers"): the real engines in one group and the other
# heavy real-stack tests in another, each run by one worker from the start (the queue's order is
# tests/conftest.py's, hence --no-loadscope-reorder), the light ones spread over what is left.
# COCKPIT_TEST_WORKERS sets the count; `-n N` or `-p no:xdist` among the arguments replaces this.
workers=(-n "${COCKPIT_TEST_WORKERS:-3}" --dist loadgroup --no-loadscope-reorder)
for a in "$@"; do
  case "$a" in -n|-n[0-9]*|--numprocesses|--numprocesses=*|no:xdist|-pno:xdist) workers=() ;; esac
done
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider ${workers[@]+"${workers[@]}"} "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "no tests were collected: that is a failure" >&2
fi
[ $rc -eq 0 ] || failed+=("pytest (exit $rc)")
.venv/bin/python -m ruff check . || failed+=("ruff check")
.venv/bin/python -m mypy || failed+=("mypy")
# through the venv's python: an entry-point script may carry another venv's shebang
.venv/bin/python -c 'import sys; from importlinter.cli import lint_imports_command; sys.argv[0] = "lint-imports"; lint_imports_command()' \
  || failed+=("lint-imports")
set -e
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
