"""The harness's time between runs read from run files (harness_gaps), and its line in a set's provenance."""

import publish
from sidecar_bench import harness_gaps


def meta(app, cid, start, end, warmup_s=5, ready_s=0.2, bursts=None):
    m = {
        "condition": {"app": app, "id": cid},
        "window": {"start": f"2026-12-06T{start}+00:00", "end": f"2026-12-06T{end}+00:00"},
        "load": {"warmup_s": warmup_s},
        "environment": {"ready_s": ready_s},
    }
    if bursts is not None:
        m["warmup"] = {"bursts": bursts}
    return m


def test_gaps_by_the_next_runs_app_leave_out_other_sittings_and_runs_warmed_until_steady():
    metas = [
        meta("go", "g1", "10:00:05.000", "10:00:15.000"),
        meta("go", "g2", "10:00:21.300", "10:00:31.300", ready_s=0.3),  # load from 16.3: gap 1.3
        meta(
            "next", "n1", "10:01:05.100", "10:01:15.100", warmup_s=30, ready_s=2.5
        ),  # from 35.1: 3.8
        meta("go", "g3", "10:01:21.200", "10:01:31.200", ready_s=None),  # from 16.2: 1.1
        meta("go", "g4", "11:00:00.000", "11:00:10.000"),  # an hour later: another sitting
        # warmed until steady: no fixed warm-up, so neither gap around it is known
        meta("go", "g5", "11:00:30.000", "11:00:40.000", bursts=[{"at_s": 1.0}]),
    ]
    rows = harness_gaps.gaps(metas)
    assert [(r["condition"], r["gap_s"], r["without_app_start_s"]) for r in rows] == [
        ("g2", 1.3, 1.0),
        ("n1", 3.8, 1.3),
        ("g3", 1.1, None),
    ]
    summary = harness_gaps.by_app(rows)
    assert summary == {
        "go": {
            "gaps": 2,
            "median_s": 1.2,
            "min_s": 1.1,
            "max_s": 1.3,
            "median_without_app_start_s": 1.0,
        },
        "next": {
            "gaps": 1,
            "median_s": 3.8,
            "min_s": 3.8,
            "max_s": 3.8,
            "median_without_app_start_s": 1.3,
        },
    }
    line = publish.harness_line(summary)
    assert line.startswith("- harness between runs")
    assert (
        "before a Go run median 1.2 s (1.1-1.3 s, 2 gaps; 1 s without the app's own start)" in line
    )
    assert "before a Next.js run median 3.8 s (3.8-3.8 s, 1 gap; 1.3 s without" in line
    assert harness_gaps.by_app([]) == {}


def test_the_workflow_benchmark_and_the_provenance_read_the_same_spans():
    import bench_workflow

    assert bench_workflow.load_span is harness_gaps.load_span
    assert publish.STRETCH_GAP_S == harness_gaps.STRETCH_GAP_S
