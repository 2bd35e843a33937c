"""on_failure: record turns only a process of the task that dies into a failure record. Every other error stops the
job whatever the setting, and writes nothing at the run file's path (docs/operations.md, "Failed runs")."""

import json

import pytest

from sidecar_bench import job, runner
from sidecar_bench.conditions import Condition, LoadSettings

CONDITION = Condition("go", 1, 2036, 0, 0)
GONE = [{"name": "gone", "url": "unix:///nonexistent/docker.sock"}]


def image_refs(tmp_path, task_variant="go") -> dict:
    """Image refs no engine has: the job must stop before any image is looked up."""
    refs = {}
    for part, variant in (("task", task_variant), ("loadgen", "loadgen")):
        refs[part] = tmp_path / f"{part}.json"
        refs[part].write_text(
            json.dumps(
                {
                    "variant": variant,
                    "tag": "sidecar-bench/none:none",
                    "inputs_digest": "d",
                    "base_image": "debian:bookworm-slim",
                    "hosts": {"local": "sha256:0"},
                }
            )
        )
    return {part: str(path) for part, path in refs.items()}


def refused(tmp_path, on_failure, refs, message):
    """The job fails with the message, and nothing, no failure record either, stands where the run would be."""
    out = tmp_path / "runs" / CONDITION.id / "rep1.parquet"
    with pytest.raises(runner.RunError, match=message):
        job.main(
            CONDITION.as_dict(),
            LoadSettings(duration_s=1).as_dict(),
            GONE,
            refs,
            str(out),
            str(tmp_path / "locks"),
            on_failure=on_failure,
        )
    assert not out.exists() and not (out.parent.exists() and list(out.parent.iterdir()))


@pytest.mark.parametrize("on_failure", ["stop", "record"])
def test_an_engine_that_does_not_answer_stops_the_job_whatever_on_failure_says(
    tmp_path, on_failure
):
    refused(
        tmp_path,
        on_failure,
        image_refs(tmp_path),
        rf"^{CONDITION.id}: no Docker host is reachable: gone",
    )


@pytest.mark.parametrize("on_failure", ["stop", "record"])
def test_a_failed_consistency_check_stops_the_job_whatever_on_failure_says(tmp_path, on_failure):
    # The task image the rule handed over is another variant's: the job refuses it, and records no failure.
    refused(
        tmp_path,
        on_failure,
        image_refs(tmp_path, task_variant="next"),
        rf"task\.json: variant 'next', {CONDITION.id} needs 'go'",
    )
