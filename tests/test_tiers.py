"""The fast tier stays fast: a test that is marked neither docker nor workflow may not start Snakemake
(tests/conftest.py), and is told which mark it needs."""

import subprocess

import pytest

from workflow_helpers import SNAKEMAKE


def test_a_fast_test_that_starts_snakemake_is_told_the_mark_it_needs():
    with pytest.raises(AssertionError, match=r"runs Snakemake: mark it @pytest.mark.workflow"):
        subprocess.run([SNAKEMAKE, "--version"], capture_output=True)


@pytest.mark.workflow
def test_a_workflow_test_may_start_snakemake():
    done = subprocess.run([SNAKEMAKE, "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip()[0].isdigit(), done.stdout + done.stderr
