"""Benchmark of the analysis stages on synthetic run files of a full-size matrix.

    .venv/bin/python scripts/dev/bench_analysis.py [--times 3] [--stages aggregate,tables,charts,calibrate,model]
                                               [--keep DIR] [--runs N --repeats R]

Default: the published `article` set's shape: its 187 conditions x 3 repetitions with 10 s windows,
each synthetic run with exactly as many successful responses as the published run of that condition
and repetition (results/published/article/runs_summary.csv `successful`: 7,328,005 in all). With
--runs N: N conditions of the older benchmark matrix (synthetic.benchmark_matrix, RPS x 30 s rows).

Writes the runs (per the run file format (record.py); runs/<condition id>/rep<N>.parquet) into a temp
dir, then runs each analysis stage the workflow runs (aggregate_runs, make_tables, plot_charts,
calibrate, model_report) in a process of its own, as Snakemake runs its scripts, --times times: by default
forked from a job server started first (jobserver.py: the library imported once, as a workflow with two
analysis jobs or more does; its start is timed and reported apart), with --job-server off a fresh Python
process that makes its own imports; and
reports per stage the median of: the process's wall time (interpreter start and imports included),
the stage's own time, its CPU time and its peak RSS (resource.getrusage ru_maxrss), each with those of the
process that draws the charts beside the chart stages (its CPU added, its peak RSS added to the stage's: an
upper bound of what both held at once). The load average and the time of 10 million additions in a Python loop before and
after is printed: the machine is shared. Not part of the test suite: timing depends on what else runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULE_SCRIPTS = ROOT / "workflow" / "scripts"
REFERENCE = ROOT / "workflow" / "reference" / "article-results.csv"
PUBLISHED_RUNS = ROOT / "results" / "published" / "article" / "runs_summary.csv"
STAGES = ("aggregate", "tables", "charts", "calibrate", "model")
NO_LIMIT_VCPU = 2.0  # the article's host: 2 CPUs


def run_stage(stage: str, work: Path) -> dict:
    """One stage in this process; returns seconds and peak RSS (MB) of this process."""
    runs = sorted(str(p) for p in (work / "runs").rglob("*.parquet"))
    setup = json.loads((work / "bench.json").read_text())
    start = time.perf_counter()
    if stage in ("charts", "model"):  # as the rule script does before its imports, under Snakemake
        try:
            from sidecar_bench import render_worker
        except ImportError:  # a commit from before it: the benchmark times older code too
            pass
        else:
            render_worker.start()
    if stage == "aggregate":
        import aggregate_runs

        aggregate_runs.main(
            runs=runs,
            summary_parquet=work / "summary.parquet",
            summary_csv=work / "summary.csv",
            runs_parquet=work / "runs_summary.parquet",
            runs_csv=work / "runs_summary.csv",
        )
    elif stage == "tables":
        import make_tables

        make_tables.main(
            summary=work / "summary.parquet", reference=REFERENCE, out_dir=work / "tables"
        )
    elif stage == "charts":
        import plot_charts

        plot_charts.main(
            summary=work / "summary.parquet",
            reference=REFERENCE,
            runs=runs,
            out_dir=work / "charts",
        )
    elif stage == "calibrate":
        import calibrate

        cal = work / "calibration"
        calibrate.main(
            runs=setup["calibration_runs"],
            summary_parquet=cal / "summary.parquet",
            summary_csv=cal / "summary.csv",
            table_md=cal / "calibration.md",
            table_csv=cal / "calibration.csv",
            no_limit_vcpu=NO_LIMIT_VCPU,
            in_matrix=setup["calibration_in_matrix"],
            runs_csv=cal / "runs_summary.csv",
        )
    elif stage == "model":
        import model_report

        model_report.main(
            summary=work / "summary.parquet",
            runs_summary=work / "runs_summary.parquet",
            calibration=work / "calibration" / "calibration.csv",
            reference=REFERENCE,
            tables_dir=work / "model" / "tables",
            charts_dir=work / "model" / "charts",
            calibration_runs=work / "calibration" / "runs_summary.csv",
        )
    else:
        raise SystemExit(f"unknown stage {stage!r}; use {', '.join(STAGES)}")
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # The chart stages' drawing process (chart_files.rendering_in_background), ended and waited for by now.
    helper = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "stage": stage,
        "seconds": round(seconds, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime + helper.ru_utime + helper.ru_stime, 2),
        # The stage's peak and its helper's added: at most what both held at once.
        "peak_rss_mb": round((usage.ru_maxrss + helper.ru_maxrss) / 1024, 1),
    }


def published_sizes(path: Path = PUBLISHED_RUNS) -> dict[tuple[str, int], int]:
    """{(condition id, repeat): successful responses} of the published article set."""
    with open(path, newline="") as handle:
        return {
            (row["condition_id"], int(row["repeat"])): int(row["successful"])
            for row in csv.DictReader(handle)
        }


def app_cpu_s(condition, wall_s: float) -> float:
    """The app's CPU in a window: what its quota leaves beside the sidecars, at least a fifth of it (the model
    takes logarithms of CPU shares: none may be 0 or negative)."""
    return (
        wall_s
        * max(condition.vcpu - condition.total_sidecar_load_pct / 100, condition.vcpu / 5)
        * 0.95
    )


def generate(work: Path, count: int | None = None, repeats: int = 3) -> dict:
    """count None: the article's shape (module docstring); else count conditions of benchmark_matrix."""
    from sidecar_bench.calibration import calibration_cells
    from sidecar_bench.synthetic import article_matrix, benchmark_matrix, run_path, write_model_run
    import pyarrow.parquet as pq

    start = time.perf_counter()
    if count is None:
        sizes = published_sizes()
        conditions = article_matrix()
        repeats = max(r for _, r in sizes)
        paths = [
            write_model_run(
                work / "runs",
                c,
                repeat=r,
                duration_s=10.0,
                rows=sizes[(c.id, r)],
                app_cpu_s=app_cpu_s(c, 10.0),
            )
            for c in conditions
            for r in range(1, repeats + 1)
        ]
    else:
        conditions = benchmark_matrix(count)
        paths = [
            write_model_run(work / "runs", c, repeat=r)
            for c in conditions
            for r in range(1, repeats + 1)
        ]
    # The calibration's runs: the matrix's own where it has the cell, else its own runs (as rule calibrate).
    cells = calibration_cells(conditions, NO_LIMIT_VCPU)
    calibration_runs = [
        str(
            run_path(
                work / ("runs" if cell.in_matrix else "calibration/runs"), cell.condition.id, r
            )
        )
        for r in range(1, repeats + 1)
        for cell in cells
    ]
    for cell in cells:
        for r in range(1, repeats + 1):
            if not cell.in_matrix:
                write_model_run(
                    work / "calibration" / "runs",
                    cell.condition,
                    repeat=r,
                    duration_s=10.0,
                    app_cpu_s=app_cpu_s(cell.condition, 10.0),
                )
    (work / "bench.json").write_text(
        json.dumps(
            {
                "calibration_runs": calibration_runs,
                "calibration_in_matrix": sorted(
                    cell.condition.id for cell in cells if cell.in_matrix
                ),
            }
        )
    )
    rows = [pq.ParquetFile(p).metadata.num_rows for p in paths]
    return {
        "conditions": len(conditions),
        "repeats": repeats,
        "runs": len(paths),
        "rows_total": sum(rows),
        "rows_max": max(rows),
        "rows_min": min(rows),
        "calibration_runs": len(calibration_runs),
        "bytes_total": sum(p.stat().st_size for p in paths),
        "generate_s": round(time.perf_counter() - start, 1),
    }


def python_loop_s(additions: int = 10_000_000) -> float:
    """Seconds for 10 million additions in a Python loop (best of 3): how fast this machine runs Python now."""
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        total = 0
        for i in range(additions):
            total += i
        best = min(best, time.perf_counter() - start)
    return round(best, 3)


def time_stage(stage: str, work: Path) -> dict:
    """One stage in a fresh process (its peak RSS is that stage's alone, as under Snakemake)."""
    start = time.perf_counter()
    # The stage imports its rule script (aggregate_runs, ...) from workflow/scripts, as Snakemake runs it.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(RULE_SCRIPTS), os.environ.get("PYTHONPATH")])
        ),
    }
    out = subprocess.run(
        [sys.executable, __file__, "--stage", stage, "--work", str(work)],
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode:
        raise SystemExit(f"stage {stage} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = round(time.perf_counter() - start, 2)
    return result


def start_job_server() -> float:
    """Start a job server as the workflow does (its stages' processes are then forked from it); seconds taken."""
    from sidecar_bench import jobserver

    start = time.perf_counter()
    jobserver.start(str(ROOT / "scripts"))
    return round(time.perf_counter() - start, 2)


def main(
    count: int | None = None,
    keep: str | None = None,
    repeats: int = 3,
    stages: tuple[str, ...] = STAGES,
    times: int = 3,
    job_server: bool = True,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-analysis-") as tmp:
        work = Path(keep) if keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = generate(work, count, repeats)
        print(json.dumps({"synthetic_data": data}), flush=True)
        server_s = start_job_server() if job_server else None
        print(json.dumps({"job_server_start_s": server_s}), flush=True)
        load_before = os.getloadavg()
        speed_before = python_loop_s()
        rounds = []
        for _ in range(times):
            timed = []
            for stage in stages:
                timed.append(time_stage(stage, work))
                print(json.dumps(timed[-1]), flush=True)
            rounds.append(timed)
        medians = []
        for i, stage in enumerate(stages):
            medians.append(
                {
                    "stage": stage,
                    **{
                        key: statistics.median(r[i][key] for r in rounds)
                        for key in ("process_s", "seconds", "cpu_s", "peak_rss_mb")
                    },
                }
            )
        totals = sorted(sum(s["process_s"] for s in timed) for timed in rounds)
        report = {
            "synthetic_data": data,
            "median": medians,
            "job_server_start_s": server_s,
            "total_process_s_median": round(statistics.median(totals), 2),
            "total_process_s_runs": [round(t, 2) for t in totals],
            "peak_rss_mb": max(s["peak_rss_mb"] for s in medians),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            # The VM's speed that hour: the same code took 10.4 s and 17.7 s a quarter of an hour apart.
            "python_loop_s_before_after": [speed_before, python_loop_s()],
        }
        for row in medians:
            print(
                f"median of {times}: {row['stage']:<10} {row['process_s']:6.2f} s process "
                f"({row['seconds']:6.2f} s in stage, {row['cpu_s']:6.2f} s CPU), peak RSS {row['peak_rss_mb']:7.1f} MB",
                flush=True,
            )
        print(
            json.dumps(
                {key: report[key] for key in report if key not in ("synthetic_data", "median")}
            ),
            flush=True,
        )
        return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="conditions of the older benchmark matrix instead of the article's shape",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="repetitions per condition with --runs (default 3)"
    )
    parser.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated stages to time (default {','.join(STAGES)})",
    )
    parser.add_argument(
        "--times", type=int, default=3, help="time every stage this many times (default 3)"
    )
    parser.add_argument("--keep", help="write the synthetic runs and outputs here and keep them")
    parser.add_argument(
        "--job-server",
        choices=("on", "off"),
        default="on",
        help="fork each stage from a job server, as a workflow does (default), or not",
    )
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        from sidecar_bench.jobserver import delegate

        # A stage's process hands itself to the job server when one runs, as a rule's script does.
        status = delegate(__file__, sys.argv[1:])
        if status is not None:
            sys.exit(status)
        # As Snakemake's preamble puts the scripts' folder on the path.
        sys.path.insert(0, str(RULE_SCRIPTS))
        print(json.dumps(run_stage(args.stage, Path(args.work))))
    else:
        try:
            main(
                args.runs,
                args.keep,
                args.repeats,
                tuple(args.stages.split(",")),
                args.times,
                args.job_server == "on",
            )
        finally:
            from sidecar_bench import jobserver

            jobserver.stop()
