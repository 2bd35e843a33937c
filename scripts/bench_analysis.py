"""Benchmark of the analysis stages on synthetic run files of a full-size matrix.

    .venv/bin/python scripts/bench_analysis.py [--runs 228] [--repeats 3] [--stages aggregate,tables,charts]
                                               [--keep DIR]

Writes synthetic runs (per the run file format (record.py); sizes like the article's: RPS x 30 s
rows each; runs/<condition id>/rep<N>.parquet) into a temp dir, then runs aggregation
(with its 1000-resample intervals per condition), tables and charts each in a fresh
Python process and reports its wall time and peak RSS (resource.getrusage ru_maxrss).
Not part of the test suite: timing here depends on what else the machine runs.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
REFERENCE = ROOT / "workflow" / "reference" / "article-results.csv"
sys.path.insert(0, str(SCRIPTS))


def run_stage(stage: str, work: Path) -> dict:
    """One stage in this process; returns seconds and peak RSS (MB) of this process."""
    runs = sorted(str(p) for p in (work / "runs").rglob("*.parquet"))
    start = time.perf_counter()
    if stage == "aggregate":
        import aggregate_runs
        aggregate_runs.main(runs=runs, summary_parquet=work / "summary.parquet", summary_csv=work / "summary.csv",
                            runs_parquet=work / "runs_summary.parquet", runs_csv=work / "runs_summary.csv")
    elif stage == "tables":
        import make_tables
        make_tables.main(summary=work / "summary.parquet", reference=REFERENCE, out_dir=work / "tables")
    elif stage == "charts":
        import plot_charts
        plot_charts.main(summary=work / "summary.parquet", reference=REFERENCE, runs=runs, out_dir=work / "charts")
    else:
        raise SystemExit(f"unknown stage {stage!r}; use aggregate, tables or charts")
    seconds = time.perf_counter() - start
    return {"stage": stage, "seconds": round(seconds, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def generate(work: Path, count: int, repeats: int = 1) -> dict:
    from sidecar_bench.synthetic import benchmark_matrix, write_model_run
    import pyarrow.parquet as pq

    start = time.perf_counter()
    paths = [write_model_run(work / "runs", c, repeat=r) for c in benchmark_matrix(count)
             for r in range(1, repeats + 1)]
    rows = [pq.ParquetFile(p).metadata.num_rows for p in paths]
    return {"conditions": count, "repeats": repeats, "runs": len(paths), "rows_total": sum(rows), "rows_max": max(rows), "rows_min": min(rows),
            "bytes_total": sum(p.stat().st_size for p in paths), "generate_s": round(time.perf_counter() - start, 1)}


def main(count: int = 228, keep: str | None = None, repeats: int = 1,
         stages: tuple[str, ...] = ("aggregate", "tables", "charts")) -> dict:
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-analysis-") as tmp:
        work = Path(keep) if keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = generate(work, count, repeats)
        print(json.dumps({"synthetic_data": data}), flush=True)
        timed = []
        for stage in stages:
            # A fresh process per stage: its peak RSS is that stage's alone (as under Snakemake).
            out = subprocess.run([sys.executable, __file__, "--stage", stage, "--work", str(work)],
                                 check=True, capture_output=True, text=True)
            timed.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(timed[-1]), flush=True)
        total = round(sum(s["seconds"] for s in timed), 2)
        report = {"synthetic_data": data, "stages": timed, "total_s": total,
                  "peak_rss_mb": max(s["peak_rss_mb"] for s in timed)}
        print(json.dumps({"total_s": total, "peak_rss_mb": report["peak_rss_mb"]}), flush=True)
        return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=228, help="number of synthetic runs (default 228)")
    parser.add_argument("--repeats", type=int, default=1, help="repetitions per condition (default 1)")
    parser.add_argument("--stages", default="aggregate,tables,charts",
                        help="comma-separated stages to time (default aggregate,tables,charts)")
    parser.add_argument("--keep", help="write the synthetic runs and outputs here and keep them")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        print(json.dumps(run_stage(args.stage, Path(args.work))))
    else:
        main(args.runs, args.keep, args.repeats, tuple(args.stages.split(",")))
