"""Taking over another preset's runs leaves its failure records where they are (docs/workflow.md, "Reruns":
"runs of other load settings, of an image since rebuilt, and failure records stay where they are")."""

from sidecar_bench import record
from sidecar_bench.conditions import LoadSettings

from test_adopt_runs import SMALL, adopt_runs, config_file, measured


def test_a_failure_record_is_not_taken_over_and_stays_where_it_is(tmp_path):
    results = measured(tmp_path)
    failed = results / "from" / "runs" / SMALL.id / "rep2.parquet"
    died = {
        "role": "app",
        "pid": 7,
        "exit_status": 137,
        "signal": "SIGKILL",
        "phase": "window",
        "oom_killed": False,
        "container_status": "exited",
        "container_exit_code": 137,
    }
    record.write_failure(
        failed,
        record.failure_record(
            SMALL.as_dict(),
            2,
            LoadSettings(duration_s=5, warmup_s=0).as_dict(),
            f"{SMALL.id}: the app stopped during the measured window; ...",
            died,
            "local",
            "2026-12-01T00:00:00+00:00",
        ),
    )
    before = failed.read_bytes()
    adopted, left = adopt_runs.main(
        "from", "to", str(results), config_file(tmp_path, {"duration_s": 5, "warmup_s": 0})
    )
    dest = results / "to" / "runs" / SMALL.id
    # The measured repetition is taken over; the failed one is not, and its record is left as it was.
    assert sorted(p.name for p in dest.iterdir()) == ["rep1.parquet"]
    assert left["a failure record"] == 1
    assert failed.read_bytes() == before and record.read_failure(failed)["repeat"] == 2
