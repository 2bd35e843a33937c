"""Publishing a preset: its files and a provenance that tells two published sets apart."""

import json

from sidecar_bench.conditions import Condition
from sidecar_bench.synthetic import write_model_run

import aggregate_runs
import publish


def test_published_set_carries_its_provenance(tmp_path):
    runs_dir = tmp_path / "results" / "demo" / "runs"
    paths = [
        write_model_run(runs_dir, condition, duration_s=5, repeat=repeat)
        for condition in (Condition("go", 0.25, 2048, 3, 5), Condition("next", 2, 2048, 0, 0))
        for repeat in (1, 2)
    ]
    base = tmp_path / "results" / "demo"
    aggregate_runs.main(
        paths,
        base / "summary.parquet",
        base / "summary.csv",
        base / "runs_summary.parquet",
        base / "runs_summary.csv",
    )
    info = publish.main("demo", str(tmp_path / "published"), str(tmp_path / "results"))
    assert info["conditions"] == 2 and info["runs"] == 4
    assert info["repeats"] == [2]
    assert info["settings"][0]["duration_s"] == 5
    assert info["settings"][0]["apps"] and set(info["settings"][0]["apps"]) <= {"go", "next"}
    assert len(info["commit"]) == 40
    # The 2 vCPU condition on the synthetic 2-CPU host is host-bound, and says so.
    assert info["flagged_by_flag"]["host_bound"] >= 1
    out = tmp_path / "published"
    assert json.loads((out / "provenance.json").read_text()) == info
    text = (out / "PROVENANCE.md").read_text()
    assert "2 conditions, 4 runs (repeats 2)" in text
    assert "host_bound" in text
    assert (out / "summary.csv").exists() and (out / "runs_summary.csv").exists()
    page = (out / "report.html").read_text()
    assert (
        '<h2 id="provenance">Provenance</h2>' in page and "2 conditions, 4 runs (repeats 2)" in page
    )


def test_the_proxy_tables_and_the_open_loop_comparison_are_published_and_shown(tmp_path):
    runs_dir = tmp_path / "results" / "demo" / "runs"
    paths = [
        write_model_run(runs_dir, Condition("go", 0.5, 2048, 1, 5), duration_s=5, repeat=r)
        for r in (1, 2)
    ]
    base = tmp_path / "results" / "demo"
    aggregate_runs.main(
        paths,
        base / "summary.parquet",
        base / "summary.csv",
        base / "runs_summary.parquet",
        base / "runs_summary.csv",
    )
    made = {
        "proxy": ["standin_gap.md", "standin_gap.csv", "standin.yaml"],
        "openloop": ["open_vs_closed.md", "open_vs_closed.csv", "open_vs_closed_p99.png"],
    }
    for sub, names in made.items():
        (base / sub).mkdir()
        for name in names:
            (base / sub / name).write_text(f"# {sub} {name}\n" if name.endswith(".md") else "x")
    (base / "openloop" / "open_vs_closed_p99.html").write_text("<html>")
    out = tmp_path / "published"
    publish.main("demo", str(out), str(tmp_path / "results"))
    for sub, names in made.items():
        assert sorted(p.name for p in (out / sub).iterdir()) == sorted(names)
    page = (out / "report.html").read_text()
    assert "A real proxy against the busy-loop stand-in" in page and "proxy standin_gap.md" in page
    assert "Open loop beside the closed loop" in page and page.count("data:image/png;base64,") >= 1


def test_the_measured_commit_comes_from_the_run_files_or_is_said_to_be_missing(tmp_path):
    from sidecar_bench.environment import project_commit

    runs_dir = tmp_path / "results" / "demo" / "runs"
    paths = [write_model_run(runs_dir, Condition("go", 0.5, 2048, 1, 25), duration_s=5)]
    base = tmp_path / "results" / "demo"
    aggregate_runs.main(
        paths,
        base / "summary.parquet",
        base / "summary.csv",
        base / "runs_summary.parquet",
        base / "runs_summary.csv",
    )
    # The model's outputs travel with the set where they were made.
    (base / "model" / "tables").mkdir(parents=True)
    (base / "model" / "tables" / "model.md").write_text("# model\n")
    (base / "calibration").mkdir()
    (base / "calibration" / "calibration.csv").write_text("app\n")
    (base / "calibration" / "runs_summary.csv").write_text("condition_id\n")
    (base / "calibration" / "summary.parquet").write_bytes(b"")
    # These run files do not record a commit: the provenance says so, or takes the one given.
    info = publish.main("demo", str(tmp_path / "p1"), str(tmp_path / "results"))
    assert (tmp_path / "p1" / "model" / "tables" / "model.md").read_text() == "# model\n"
    # The calibration's per-run rows travel too: a later model can be made from the set alone.
    assert {p.name for p in (tmp_path / "p1" / "calibration").iterdir()} == {
        "calibration.csv",
        "runs_summary.csv",
    }
    assert not (tmp_path / "p1" / "model" / "charts").exists()
    assert info["measured_with_commit"] == ["not recorded"]
    info = publish.main(
        "demo", str(tmp_path / "p2"), str(tmp_path / "results"), measured_commit="3c084d7"
    )
    assert info["measured_with_commit"] == ["3c084d7 (given)"]
    assert "measured with commit 3c084d7 (given)" in (tmp_path / "p2" / "PROVENANCE.md").read_text()
    # A run records the checkout's commit (40 hex digits, "-dirty" with uncommitted changes).
    commit = project_commit()
    assert len(commit.removesuffix("-dirty")) == 40
    assert project_commit(tmp_path) == "unknown"


def test_a_republished_set_replaces_the_old_one_whole_and_states_the_calibration_window(tmp_path):
    base = tmp_path / "results" / "demo"
    paths = [write_model_run(base / "runs", Condition("go", 0.5, 2048, 1, 25), duration_s=5)]
    aggregate_runs.main(
        paths,
        base / "summary.parquet",
        base / "summary.csv",
        base / "runs_summary.parquet",
        base / "runs_summary.csv",
    )
    write_model_run(base / "calibration" / "runs", Condition("go", 2, 2048, 0, 0), duration_s=5)
    out = tmp_path / "published" / "demo"
    publish.main("demo", str(out), str(tmp_path / "results"))
    (out / "charts").mkdir()
    (out / "charts" / "a_chart_no_longer_made.png").write_bytes(b"")
    info = publish.main("demo", str(out), str(tmp_path / "results"), title="Demo, again")
    assert not (out / "charts" / "a_chart_no_longer_made.png").exists()
    # Nothing of the swap stays beside the set.
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo"]
    assert info["calibration_runs"] == 1
    assert info["calibration_measured_from"] < info["calibration_measured_to"]
    assert info["host_busy_pct"]["max"] >= info["host_busy_pct"]["median"] > 0
    text = (out / "PROVENANCE.md").read_text()
    assert text.startswith("# Demo, again\n")
    assert "- calibration: 1 runs of its own, measured " in text
    assert "host CPUs busy during the runs" in text


def test_a_failed_publication_leaves_the_published_set_as_it_was(tmp_path, monkeypatch):
    base = tmp_path / "results" / "demo"
    paths = [write_model_run(base / "runs", Condition("go", 0.5, 2048, 1, 25), duration_s=5)]
    aggregate_runs.main(
        paths,
        base / "summary.parquet",
        base / "summary.csv",
        base / "runs_summary.parquet",
        base / "runs_summary.csv",
    )
    out = tmp_path / "published" / "demo"
    publish.main("demo", str(out), str(tmp_path / "results"))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(publish, "provenance_markdown", broken)
    try:
        publish.main("demo", str(out), str(tmp_path / "results"))
    except OSError:
        pass
    else:
        raise AssertionError("the publication should have failed")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo"]


def test_the_set_report_stands_alone_with_every_chart_and_table(tmp_path):
    from sidecar_bench import set_report

    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "rps_retained.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg"></svg>'
    )
    (tmp_path / "charts" / "rps_retained.png").write_bytes(b"\x89PNG")
    (tmp_path / "model" / "charts").mkdir(parents=True)
    (tmp_path / "model" / "charts" / "only_png.png").write_bytes(b"\x89PNG")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "load_sweep_go.md").write_text(
        "# Go <sweep>\n\n| Total load | RPS |\n|---|---|\n| 0% | 797 [773–819] |\n| 15% | 508 S ± |\n\n"
        "- a note with `code` and a [link](tables/x.md)\n  that goes on\n- another\n"
    )
    (tmp_path / "PROVENANCE.md").write_text("# Demo\n\n- preset `demo`: 2 conditions\n")
    page = set_report.write(tmp_path, "Demo & more").read_text()
    assert "<title>Demo &amp; more</title>" in page
    assert "<h3>Go &lt;sweep&gt;</h3>" in page  # a table's heading sits under its section
    assert "<th>Total load</th><th>RPS</th>" in page and "<td>797 [773–819]</td>" in page
    assert "<li>a note with <code>code</code> and a link that goes on</li>" in page
    assert "<li>preset <code>demo</code>: 2 conditions</li>" in page
    # Charts as their SVG where made (not twice), as PNG otherwise; nothing is fetched from elsewhere.
    assert (
        page.count("data:image/svg+xml;base64,") == 1 and page.count("data:image/png;base64,") == 1
    )
    assert 'src="http' not in page and "<script" not in page


def test_a_set_measured_in_several_sittings_says_when_each_part_was_measured():
    def meta(start, end, commit):
        return {
            "window": {"start": f"2026-12-01T{start}+00:00", "end": f"2026-12-01T{end}+00:00"},
            "environment": {"project_commit": commit},
        }

    metas = [
        meta("12:05:00", "12:05:10", "c00918e"),
        meta("09:56:02", "09:56:12", "2b6a71e"),
        meta("09:56:20", "09:56:30", "2b6a71e-dirty"),
        meta("12:05:20", "12:05:30", "c00918e"),
        meta("12:14:00", "12:14:10", "c00918e"),
        meta("12:58:16", "12:58:26", "488c26f"),
    ]
    parts = publish.stretches(metas)
    # 12:05:30 -> 12:14:00 is within ten minutes: one sitting; 12:14:10 -> 12:58:16 is not.
    assert [(p["from"][11:19], p["to"][11:19], p["runs"]) for p in parts] == [
        ("09:56:02", "09:56:30", 2),
        ("12:05:00", "12:14:10", 3),
        ("12:58:16", "12:58:26", 1),
    ]
    assert parts[0]["commits"] == ["2b6a71e", "2b6a71e-dirty"] and parts[2]["commits"] == [
        "488c26f"
    ]
    assert len(publish.stretches(metas, gap_s=3 * 3600)) == 1
    info = {
        "preset": "article",
        "conditions": 1,
        "runs": 6,
        "repeats": [3],
        "settings": [],
        "stretches": parts,
        "measured_from": parts[0]["from"],
        "measured_to": parts[-1]["to"],
        "measured_with_commit": [],
        "commit": "0" * 40,
        "commit_subject": "s",
        "uncommitted_changes": False,
        "host": {
            k: []
            for k in (
                "cpu_model",
                "cpu_count",
                "kernel",
                "cgroup_version",
                "docker_version",
                "hey_version",
            )
        },
        "images": {"task": [], "loadgen": []},
        "requests": {"successful": 0, "errors": 0},
        "flagged_conditions": 0,
        "flagged_by_flag": {},
    }
    text = publish.provenance_markdown(info, "t")
    assert "09:56:30+00:00: 2 runs, commit 2b6a71e, 2b6a71e-dirty" in text
    assert (
        "in 3 stretches:" in text
        and "  - 2026-12-01T12:05:00+00:00 to 2026-12-01T12:14:10+00:00: 3 runs" in text
    )
    two = {
        **info,
        "settings": [
            {
                "duration_s": 10,
                "warmup_s": 30,
                "concurrency": 10,
                "sidecar_burn": "wall",
                "apps": ["next"],
            },
            {
                "duration_s": 10,
                "warmup_s": 5,
                "concurrency": 10,
                "sidecar_burn": "wall",
                "apps": ["go"],
            },
        ],
    }
    assert (
        "next: 10 s window, 30 s warm-up, concurrency 10, sidecar burn wall; go: 10 s window, 5 s warm-up"
        in publish.provenance_markdown(two, "t")
    )
    one = {**info, "settings": two["settings"][1:]}
    assert "(repeats 3); 10 s window, 5 s warm-up" in publish.provenance_markdown(one, "t")
