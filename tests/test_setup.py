"""The set-up both README commands run first (scripts/bench.sh setup): idempotent on a machine that has
everything, and naming what it cannot install with the command that installs it."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "scripts" / "bench.sh"
INSTALLS = ("apt-get", "installing", "creating the virtual environment", "starting dockerd")


@pytest.mark.docker
def test_setup_on_a_machine_that_has_everything_installs_nothing():
    done = subprocess.run([str(BENCH), "setup"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if any(word in line for word in INSTALLS)]
    assert said == [], done.stderr


@pytest.mark.docker
def test_setup_names_what_it_cannot_install_with_the_command_that_installs_it(tmp_path):
    # A PATH with every command of this machine but debootstrap and apt-get: a machine without debootstrap
    # where nothing can be installed (not Debian-like).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = Path(folder) / name
            if (
                name in ("debootstrap", "apt-get")
                or (bin_dir / name).exists()
                or not os.access(target, os.X_OK)
            ):
                continue
            (bin_dir / name).symlink_to(target)
    env = {**os.environ, "PATH": str(bin_dir)}
    done = subprocess.run(
        ["bash", str(BENCH), "setup"], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 1, done.stderr
    assert (
        "setup: error: 'debootstrap' is missing (makes base images where no registry can be reached). "
        "Install it (Debian/Ubuntu: apt-get install debootstrap) and run this again."
    ) in done.stderr, done.stderr
