"""The harness benchmark's accounting: one run's time between loads, split by phase."""

import bench_harness


def test_a_runs_time_between_loads_is_split_by_phase_without_counting_the_load_or_a_wait():
    # Spawned at 0, imports done at 1, job.main from 1 to 20, exited at 20.5. The lease is refused
    # at 1.1 (someone else holds the engine) and taken at 5.1 after a 4 s wait; hey runs 8-12 (a 1 s
    # warm-up) and 12.2-15.4 (the 3 s window) with a snapshot inside it that costs nothing.
    events = [
        ("connect", 1.0, 1.1, True),
        ("flock", 1.1, 1.1, True),
        ("lease", 1.1, 1.2, False),
        ("flock", 5.1, 5.1, True),
        ("lease", 5.1, 5.6, True),
        ("checks", 5.6, 5.7, True),
        ("task start", 6.0, 7.0, True),
        ("readiness", 7.0, 8.0, True),
        ("load", 8.0, 9.2, True),
        ("reads", 9.2, 9.4, True),
        ("load", 12.2, 15.4, True),
        ("reads", 15.0, 15.2, True),
        ("reads", 15.4, 16.0, True),
        ("parsing", 16.0, 16.5, True),
        ("writing", 16.5, 17.0, True),
        ("clean-up", 17.0, 18.0, True),
        ("lease", 19.0, 19.5, True),
    ]
    timings = {
        "started": 0.05,
        "entered": 1.0,
        "returned": 20.0,
        "events": events,
        "counts": {"api_requests": 9},
    }
    run = bench_harness.breakdown(timings, spawned=0.0, exited=20.5, load_s=4.0)
    phases = run["phases_s"]
    assert run["lock_wait_s"] == 4.0
    assert run["harness_s"] == 20.5 - 4.0 - 4.0
    assert phases["loadgen"] == round(1.2 + 3.2 - 4.0, 3)  # the hey execs beyond their 4 s of load
    assert phases["reads"] == round(0.2 + 0.6, 3)  # the snapshot inside hey's window is load time
    assert phases["lease"] == round(0.5 + 0.5, 3)  # the refused attempt is part of the wait
    assert phases["start+imports"] == 1.0 and phases["exit"] == 0.5
    assert phases["other"] == round(0.3 + 2.8 + 1.0 + 0.5, 3)  # the gaps between the timed steps
    assert round(sum(phases.values()), 3) == run["harness_s"]
    assert run["api_requests"] == 9
