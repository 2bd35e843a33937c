"""The process that draws a chart stage's charts beside it (render_worker, chart_files.rendering_in_background):
the same bytes as drawn in the stage, a failure that names its chart, and nothing left behind."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import aggregate_runs
import plot_charts
from sidecar_bench import chart_files, render_worker
from sidecar_bench.synthetic import write_small_set

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"
VL_VERSION = chart_files._vl_version()


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    root = tmp_path_factory.mktemp("render")
    runs = write_small_set(root / "runs")
    aggregate_runs.main(
        runs=runs, summary_parquet=root / "summary.parquet", summary_csv=root / "summary.csv"
    )
    return root / "summary.parquet", runs


@pytest.fixture(autouse=True)
def own_temp_dir(tmp_path, monkeypatch):
    """This test's own temporary folder, where the specs' folders go: other test processes make theirs too."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def specs_left() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("sidecar-bench-specs-*")}


def test_charts_drawn_beside_the_stage_are_byte_for_byte_those_drawn_in_it(
    summary, tmp_path, monkeypatch
):
    path, runs = summary
    assert specs_left() == set()
    written = {}
    started, asking = [], {}
    original = render_worker.Worker.__init__

    def counted(self, *args, **kwargs):
        started.append(asking["stage"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(render_worker.Worker, "__init__", counted)
    for name, beside in (("beside", True), ("inside", False)):
        asking["stage"] = name
        monkeypatch.setattr(render_worker, "two_cpus", lambda beside=beside: beside)
        written[name] = plot_charts.main(
            summary=path, reference=REFERENCE, runs=runs, out_dir=tmp_path / name
        )
    # one process, for the stage that may use two CPUs; none for the other
    assert started == ["beside"]
    assert [p.name for p in written["beside"]] == [p.name for p in written["inside"]]
    assert {p.suffix for p in written["beside"]} == {".html", ".png", ".svg"}
    for a, b in zip(written["beside"], written["inside"]):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert not [p for p in (tmp_path / "beside").iterdir() if p.name.startswith(".")]
    assert specs_left() == set()  # the specs handed over are removed


def test_a_chart_it_cannot_draw_fails_the_block_naming_the_chart(tmp_path):
    assert specs_left() == set()
    with pytest.raises(RuntimeError, match=r"charts not drawn:\nbroken: .*") as raised:
        with chart_files.rendering_in_background(enabled=True):
            worker = chart_files._background
            worker.draw(
                {
                    "mark": "point",
                    "data": {"values": [{"x": 1}]},
                    "encoding": {"x": {"field": "x", "type": "quantitative"}},
                },
                "fine",
                VL_VERSION,
                tmp_path / "fine.svg",
                tmp_path / "fine.png",
                2,
                72,
            )
            worker.draw({"layer": 5}, "broken", VL_VERSION, tmp_path / "broken.svg", None, 2, 72)
    assert "fine" not in str(raised.value).split("\n", 1)[1]  # only the chart that failed is named
    assert (tmp_path / "fine.svg").read_text().startswith("<svg")
    assert (tmp_path / "fine.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "broken.svg").exists()
    assert worker.process.poll() is not None and chart_files._background is None
    assert specs_left() == set()


def test_a_process_that_dies_fails_the_block_with_its_exit_status(tmp_path):
    # Dead before a chart is handed over, and after: each says so, with the exit status.
    with pytest.raises(RuntimeError, match=r"ended \(exit status -9\) before it could take lost"):
        with chart_files.rendering_in_background(enabled=True):
            worker = chart_files._background
            worker.process.kill()
            worker.process.wait()
            big = {"mark": "point", "data": {"values": [{"x": i} for i in range(20000)]}}
            for i in range(20):  # the pipe's buffer fills, or the broken pipe shows at once
                worker.draw(big, "lost", VL_VERSION, tmp_path / "lost.svg", None, 2, 72)
    with pytest.raises(RuntimeError, match=r"ended \(exit status -9\) before it had drawn late"):
        with chart_files.rendering_in_background(enabled=True):
            worker = chart_files._background
            worker.asked.append("late")  # handed over, then the process dies
            worker.process.kill()


def test_an_error_in_the_block_ends_the_process_and_draws_nothing_more(tmp_path):
    with pytest.raises(ValueError, match="the stage failed"):
        with chart_files.rendering_in_background(enabled=True):
            worker = chart_files._background
            raise ValueError("the stage failed")
    assert worker.process.poll() is not None and chart_files._background is None


def test_the_process_ends_within_seconds_of_a_stage_killed_with_sigkill():
    """A stage killed by kill -9 (Ctrl-C's escalation, a cluster's time limit) leaves no process drawing: the
    process reads the end of its input when the stage's end of the pipe closes with the stage, and removes the
    folder of the specs handed to it."""
    stage = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from sidecar_bench import render_worker\n"
            "render_worker.start()\n"
            "print(render_worker._started.process.pid, render_worker._started.specs, flush=True)\n"
            "import time; time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(render_worker.__file__).resolve().parents[1])},
    )
    pid, specs = stage.stdout.readline().split()
    pid = int(pid)
    assert _alive(pid) and Path(specs).is_dir()
    stage.send_signal(signal.SIGKILL)
    stage.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert not Path(specs).exists()  # the specs' folder goes with it


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has ended; its parent (here: init, once adopted) reaps it


def test_a_request_that_fails_is_answered_and_the_next_one_is_still_served(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"mark": "point", "data": {"values": [{"x": 1}]}}))
    answers = []
    good = {
        "spec": str(spec),
        "vl_version": VL_VERSION,
        "svg": str(tmp_path / "a.svg"),
        "png": None,
    }
    render_worker.serve(["not json\n", "\n", json.dumps(good) + "\n"], answers.append)
    assert len(answers) == 2
    assert "JSONDecodeError" in answers[0]["error"] and answers[1] == {"ok": True}
    assert (tmp_path / "a.svg").read_text().startswith("<svg")


def test_importing_a_chart_script_starts_no_process():
    """Only a run under Snakemake starts the process before the imports (the tests import the scripts)."""
    import model_report  # noqa: F401

    assert render_worker._started is None
    assert render_worker.take_started() is None


def test_a_started_process_is_taken_by_the_block_and_dropped_where_one_cpu_would_draw(monkeypatch):
    monkeypatch.setattr(render_worker, "two_cpus", lambda: True)
    render_worker.start()
    started = render_worker._started
    with chart_files.rendering_in_background():
        assert chart_files._background is started
    assert started.process.poll() is not None
    render_worker.start()
    started = render_worker._started
    with chart_files.rendering_in_background(enabled=False):
        assert chart_files._background is None
    assert started.process.poll() is not None and render_worker._started is None
