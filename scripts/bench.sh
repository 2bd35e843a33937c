#!/usr/bin/env bash
# sidecar-bench entry point. Every subcommand first runs the idempotent set-up.
#
#   scripts/bench.sh run [snakemake args]   set up, then run the experiment (snakemake --cores 1)
#   scripts/bench.sh test [pytest args]     set up, lint, then run the test suite (with no args: the
#                                           engine-free tiers on every core, then the engine's tests alone)
#   scripts/bench.sh lint                   set up Python, then lint only (ruff, snakefmt)
#   scripts/bench.sh setup                  set up only
#
# Set-up: a virtual environment (.venv) with pinned packages and the library
# (scripts/sidecar_bench) installed in place; a Docker engine
# that answers (the one DOCKER_HOST or the local socket names; on Debian as
# root, docker.io is installed and dockerd started when none answers);
# Node.js + npm (the Next.js app is built on the host) and debootstrap (base
# images are made locally where no registry can be reached).
set -euo pipefail
# Python's bytecode cache (__pycache__, ignored by git) is kept whatever the environment asks: without it every
# Snakemake job compiles the library again, and every pytest worker rewrites the tests' asserts (5 s a worker here).
unset PYTHONDONTWRITEBYTECODE

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
REQS="$ROOT/workflow/envs/requirements.txt"
LOCK="$ROOT/workflow/envs/requirements.lock"
DOCKERD_LOG=${SIDECAR_BENCH_DOCKERD_LOG:-/var/log/sidecar-bench-dockerd.log}

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

can_install_debs() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

APT_UPDATED=
apt_install() {
  can_install_debs || return 1
  if [ -z "$APT_UPDATED" ]; then
    say "apt-get update"
    apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need_command() {  # need_command CMD DEB_PACKAGE WHY
  command -v "$1" >/dev/null 2>&1 && return 0
  apt_install "$2" || die "'$1' is missing ($3). Install it (Debian/Ubuntu: apt-get install $2) and run this again."
  command -v "$1" >/dev/null 2>&1 || die "'$1' is still missing after installing $2."
}

setup_python() {
  need_command python3 python3 "runs the workflow"
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "Python 3.11 or newer is needed; python3 is $(python3 -V 2>&1)."
  local stamp="$VENV/.sidecar-bench-requirements"
  local want
  want=$(cat "$REQS" "$LOCK" | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    if [ ! -x "$VENV/bin/python" ]; then
      say "creating the virtual environment $VENV"
      python3 -m venv "$VENV" 2>/dev/null || {
        apt_install python3-venv || die "python3 -m venv failed: install python3-venv."
        python3 -m venv "$VENV"
      }
    fi
    say "installing pinned Python packages (workflow/envs/requirements.lock)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS" -c "$LOCK"
    echo "$want" >"$stamp"
  fi
}

# The library (scripts/sidecar_bench, pyproject.toml [project]) installed in place, so that the
# workflow, its rule scripts and the tools import it, and an edit takes effect at once. Nothing is
# downloaded: its dependencies and its build back-end (setuptools) are the pinned packages above.
library_from() {  # where $VENV/bin/python imports the library from (its folder), or nothing
  "$VENV/bin/python" -I -c 'import os, sidecar_bench; print(os.path.dirname(os.path.realpath(sidecar_bench.__file__)))' \
    2>/dev/null || true
}

install_library() {
  local here found
  here=$(cd "$ROOT/scripts/sidecar_bench" && pwd -P)
  found=$(library_from)
  [ "$found" = "$here" ] && return 0
  if [ "$(cd "$VENV" && pwd -P)" != "$(cd "$ROOT" && pwd -P)/.venv" ]; then
    # The virtual environment of another checkout (this .venv links to it): its install is that checkout's.
    say "note: $VENV is another checkout's; it imports the library from ${found:-nowhere (run the set-up there)}:"
    say "note: Snakemake and the tools run that library, pytest this checkout's (pyproject.toml, pythonpath)"
    return 0
  fi
  say "installing the library scripts/sidecar_bench in place (pip install --editable $ROOT)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
    --editable "$ROOT" || die "installing the library failed (pyproject.toml [project])."
  [ "$(library_from)" = "$here" ] \
    || die "the library is installed, yet $VENV/bin/python does not import it from $here."
}

docker_answers() { "$VENV/bin/python" -c 'import docker; docker.from_env(timeout=5).ping()' >/dev/null 2>&1; }

setup_docker() {
  docker_answers && return 0
  if [ -n "${DOCKER_HOST:-}" ]; then
    die "no Docker engine answers at DOCKER_HOST=$DOCKER_HOST. Start it, or unset DOCKER_HOST to use a local one."
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    apt_install docker.io \
      || die "no Docker engine answers and dockerd is not installed. Install Docker (Debian: apt-get install docker.io) and start it."
  fi
  if ! pgrep -x dockerd >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "no Docker engine answers. Start it (sudo systemctl start docker) or run this as root."
    say "starting dockerd (log: $DOCKERD_LOG)"
    # setsid: the engine outlives this script and is not killed with its process group.
    setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  local i
  for i in $(seq 1 60); do
    docker_answers && { say "Docker engine is up"; return 0; }
    sleep 1
  done
  die "dockerd did not answer within 60 s; see $DOCKERD_LOG."
}

setup_host_tools() {
  # The Next.js app is built on the host (containers may not reach npm's registry).
  need_command node nodejs "builds the Next.js app"
  need_command npm npm "builds the Next.js app"
  # Base images are made with debootstrap where none can be pulled.
  need_command debootstrap debootstrap "makes base images where no registry can be reached"
}

slurm_installed() {
  local cmd
  for cmd in munged slurmctld slurmd sbatch squeue scancel; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || return 1
  done
}

# Lint before the tests: ruff's lint and format check (pyproject.toml, [tool.ruff]) on the Python, snakefmt on the rules.
lint() {
  printf 'lint: ruff check\n' >&2
  "$VENV/bin/ruff" check --no-cache "$ROOT" || die "ruff check failed (configuration: pyproject.toml, [tool.ruff])."
  printf 'lint: ruff format --check\n' >&2
  "$VENV/bin/ruff" format --check --no-cache "$ROOT" \
    || die "ruff format would change the files above; run: .venv/bin/ruff format ."
  printf 'lint: snakefmt --check\n' >&2
  "$VENV/bin/snakefmt" --check Snakefile workflow/rules/ \
    || die "snakefmt would change the rule files; run: .venv/bin/snakefmt Snakefile workflow/rules/"
}

setup() {
  setup_python
  install_library
  setup_docker
  setup_host_tools
}

cmd=${1:-run}
[ $# -gt 0 ] && shift
cd "$ROOT"
case "$cmd" in
  setup) setup ;;
  lint)
    setup_python
    lint
    ;;
  run)
    setup
    exec "$VENV/bin/snakemake" --cores 1 "$@"
    ;;
  test)
    setup
    # The remote-engine test reaches this machine's engine through an sshd of its own.
    [ -x /usr/sbin/sshd ] || apt_install openssh-server \
      || die "the tests need openssh-server (apt-get install openssh-server)."
    # The SLURM tests start a one-node cluster of their own (tests/slurm_cluster.py); where
    # these cannot be installed (not root, not Debian-like) they are skipped, saying why.
    if ! slurm_installed; then
      apt_install munge slurmctld slurmd slurm-client \
        || say "SLURM is not installed (apt-get install munge slurmctld slurmd slurm-client): the SLURM tests will be skipped"
    fi
    lint
    [ $# -gt 0 ] && exec "$VENV/bin/python" -m pytest "$@"
    # The whole suite in two steps: the tests that need no engine on every core (pytest-xdist), then
    # the engine's tests alone, one at a time: they measure real CPU limits, which a test running
    # beside them would disturb. Both steps run; the suite fails if either does.
    status=0
    printf 'test: the tests without the engine (fast and workflow tiers), on %s workers\n' "$(nproc)" >&2
    "$VENV/bin/python" -m pytest -n "$(nproc)" -m "not docker" || status=$?
    printf 'test: the tests of the engine, alone\n' >&2
    "$VENV/bin/python" -m pytest -m docker || status=$((status ? status : $?))
    exit "$status"
    ;;
  *) die "unknown command '$cmd' (use run, test, lint or setup)" ;;
esac
