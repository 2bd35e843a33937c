"""The local lock directory a run job takes its engine's lock in: the job refuses one that is a symlink, another
user's, or writable by others (docs/operations.md, "Who measures"), before it reaches any engine and without
writing a lock file there."""

import os

import pytest

from sidecar_bench import job, runner
from sidecar_bench.conditions import Condition, LoadSettings
from test_validation import image_refs

CONDITION = Condition("go", 1, 2035, 0, 0)
NOBODY = 65534


def symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "locks").symlink_to(real)
    return tmp_path / "locks", real


def anothers(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root (chown)")
    theirs = tmp_path / "locks"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    return theirs, theirs


def open_to_all(tmp_path):
    shared = tmp_path / "locks"
    shared.mkdir()
    shared.chmod(0o777)
    return shared, shared


@pytest.mark.parametrize(
    "make, refusal",
    [
        (symlink, r"lock directory .*/locks is not a directory \(a symlink\?\)"),
        (anothers, rf"lock directory .*/locks belongs to uid {NOBODY}, not to you \(0\)"),
        (open_to_all, r"lock directory .*/locks is writable by others \(mode 777\)"),
    ],
    ids=["symlink", "another user's", "writable by others"],
)
def test_the_job_refuses_a_lock_directory_that_is_not_its_own(tmp_path, make, refusal):
    locks, inside = make(tmp_path)
    out = tmp_path / "runs" / "rep1.parquet"
    # An engine that does not exist: the refusal comes first, or the job would say the host is unreachable.
    with pytest.raises(runner.RunError, match=rf"^{CONDITION.id}: {refusal}"):
        job.main(
            CONDITION.as_dict(),
            LoadSettings(duration_s=1).as_dict(),
            [{"name": "gone", "url": "unix:///nonexistent/docker.sock"}],
            image_refs(tmp_path),
            str(out),
            str(locks),
        )
    assert list(inside.iterdir()) == [] and not out.exists()


def test_a_private_directory_of_ones_own_is_taken(tmp_path):
    # The same job with a directory of its own gets past the lock directory, to the engine that is not there.
    with pytest.raises(
        runner.RunError, match=rf"^{CONDITION.id}: no Docker host is reachable: gone"
    ):
        job.main(
            CONDITION.as_dict(),
            LoadSettings(duration_s=1).as_dict(),
            [{"name": "gone", "url": "unix:///nonexistent/docker.sock"}],
            image_refs(tmp_path),
            str(tmp_path / "runs" / "rep1.parquet"),
            str(tmp_path / "locks"),
        )
    assert oct((tmp_path / "locks").stat().st_mode & 0o777) == oct(0o700)
