"""Publish one preset's results with their provenance.

    .venv/bin/python scripts/publish.py PRESET DEST [--results results] [--title TEXT] [--measured-commit C]

Copies results/<preset>/ summary.csv, runs_summary.csv, tables (Markdown and
CSV), charts (PNG and SVG), the CPU-budget model's calibration, tables and charts,
the real proxy's tables and the open loop's table and chart (where made) into DEST, and writes
DEST/provenance.json and DEST/PROVENANCE.md: the project's commit, the image
ids, the host (CPU model, cores, kernel, cgroup and Docker versions), the first
and last measured window, the settings (window, repetitions, warm-up, sidecar
burn mode, concurrency) and how many conditions were flagged, by flag, and
DEST/report.html: the provenance, every chart and every table on one
self-contained page. Raw run files are never copied (they stay out of git).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from sidecar_bench import flags as flagmod
from sidecar_bench import harness_gaps, set_report
from sidecar_bench.runfile import read_meta

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _distinct(frame: pd.DataFrame, column: str) -> list[Any]:
    if column not in frame.columns:
        return []
    values = set()
    for value in frame[column].dropna():
        values.update(str(value).split(";"))
    return sorted(values)


# Runs further apart than this (from one window's end to the next one's start) belong to two
# stretches of measurement: a set measured in several sittings, or partly adopted from another
# preset's runs, says when each part was measured and with which commit (harness_gaps.STRETCH_GAP_S).
STRETCH_GAP_S = harness_gaps.STRETCH_GAP_S


def stretches(metas: list[dict[str, Any]], gap_s: float = STRETCH_GAP_S) -> list[dict[str, Any]]:
    """The runs grouped into stretches of measurement: first start, last end, runs, commits."""
    parts: list[dict[str, Any]] = []
    last_end = None
    for meta in sorted(metas, key=lambda m: datetime.fromisoformat(m["window"]["start"])):
        start, end = (datetime.fromisoformat(meta["window"][k]) for k in ("start", "end"))
        if last_end is None or (start - last_end).total_seconds() > gap_s:
            parts.append(
                {
                    "from": meta["window"]["start"],
                    "to": meta["window"]["end"],
                    "runs": 0,
                    "commits": set(),
                }
            )
            last_end = end
        part = parts[-1]
        if end >= last_end:
            part["to"], last_end = meta["window"]["end"], end
        part["runs"] += 1
        part["commits"].add(
            str((meta.get("environment") or {}).get("project_commit") or "not recorded")
        )
    return [{**part, "commits": sorted(part["commits"])} for part in parts]


def provenance(results: Path, preset: str, measured_commit: str | None = None) -> dict[str, Any]:
    """What made the preset's results, from its summaries and its run files' metadata.

    measured_commit: the commit the runs were measured with, for run files that do not record it
    (environment.project_commit, recorded since run files carry it).
    """
    base = results / preset
    runs = pd.read_parquet(base / "runs_summary.parquet")
    summary = pd.read_parquet(base / "summary.parquet")
    metas = [read_meta(path) for path in runs["run_file"]]
    starts = sorted(meta["window"]["start"] for meta in metas)
    ends = sorted(meta["window"]["end"] for meta in metas)
    # The calibration's own runs (the app alone where the matrix has no such cell): often
    # measured at another time than the matrix, so their window is stated apart.
    calibration_metas = [
        read_meta(path) for path in sorted((base / "calibration" / "runs").glob("*/rep*.parquet"))
    ]
    busy = (
        pd.to_numeric(runs["host_busy_pct"], errors="coerce").dropna()
        if "host_busy_pct" in runs.columns
        else pd.Series(dtype=float)
    )
    # Each distinct load setting and the apps measured with it (a preset may warm Next.js up longer than Go).
    loads: dict[str, set[str]] = {}
    for meta in metas:
        text = json.dumps(
            {
                k: meta["load"].get(k)
                for k in ("duration_s", "warmup_s", "concurrency", "sidecar_burn")
            },
            sort_keys=True,
        )
        loads.setdefault(text, set()).add(str((meta.get("condition") or {}).get("app", "?")))
    flagged = {
        code: int(summary[f"flag_{code}"].sum())
        for code in flagmod.CODES
        if f"flag_{code}" in summary
    }
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    recorded = sorted(
        {
            str(meta["environment"]["project_commit"])
            for meta in [*metas, *calibration_metas]
            if (meta.get("environment") or {}).get("project_commit")
        }
    )
    unrecorded = sum(
        1
        for meta in [*metas, *calibration_metas]
        if not (meta.get("environment") or {}).get("project_commit")
    )
    measured = recorded + (
        [f"{measured_commit} (given)" if measured_commit else "not recorded"] if unrecorded else []
    )
    return {
        "preset": preset,
        "measured_with_commit": measured,
        "commit": _git("rev-parse", "HEAD"),
        "commit_subject": _git("log", "-1", "--format=%s"),
        "uncommitted_changes": dirty,
        "conditions": int(len(summary)),
        "runs": int(len(runs)),
        "repeats": sorted({int(r) for r in summary["repeats"]}),
        "settings": [
            {**json.loads(text), "apps": sorted(apps)} for text, apps in sorted(loads.items())
        ],
        "measured_from": starts[0] if starts else None,
        "measured_to": ends[-1] if ends else None,
        "stretches": stretches(metas),
        "calibration_runs": len(calibration_metas),
        "calibration_measured_from": min(
            (m["window"]["start"] for m in calibration_metas), default=None
        ),
        "calibration_measured_to": max(
            (m["window"]["end"] for m in calibration_metas), default=None
        ),
        # How busy the host's CPUs were during the runs (the task's quota included): a set
        # measured beside other work shows it here.
        "host_busy_pct": {
            "median": round(float(busy.median()), 1),
            "max": round(float(busy.max()), 1),
        }
        if len(busy)
        else None,
        "host": {
            "hostname": _distinct(runs, "env_hostname"),
            "cpu_model": _distinct(runs, "env_cpu_model"),
            "cpu_count": _distinct(runs, "env_cpu_count"),
            "kernel": _distinct(runs, "env_kernel"),
            "cgroup_version": _distinct(runs, "env_cgroup_version"),
            "docker_version": _distinct(runs, "env_docker_version"),
            "hey_version": _distinct(runs, "env_hey_version"),
        },
        "images": {
            "task": _distinct(runs, "env_image_id"),
            "loadgen": _distinct(runs, "env_loadgen_image_id"),
        },
        "requests": {
            "successful": int(summary["successful"].sum()),
            "errors": int(summary["errors"].sum()),
        },
        "flagged_conditions": int((summary["flags"].fillna("") != "").sum()),
        "flagged_by_flag": flagged,
        # The harness's time between runs of the same sitting (the calibration's runs among them), by the next
        # run's app: what the workflow spent beyond the load (harness_gaps).
        "harness_between_runs": harness_gaps.by_app(
            harness_gaps.gaps([*metas, *calibration_metas])
        ),
    }


APP_NAMES = {"go": "Go", "next": "Next.js"}


def harness_line(by_app: dict[str, dict[str, Any]]) -> str:
    """The provenance's line on the harness's time between runs (harness_gaps.by_app)."""
    parts = []
    for app, row in by_app.items():
        beside = row.get("median_without_app_start_s")
        parts.append(
            f"before a {APP_NAMES.get(app, app)} run median {row['median_s']:g} s "
            f"({row['min_s']:g}-{row['max_s']:g} s, {row['gaps']} gap{'s' if row['gaps'] != 1 else ''}"
            + (f"; {beside:g} s without the app's own start" if beside is not None else "")
            + ")"
        )
    return (
        "- harness between runs (from one run's end of load to the next one's start, in the same sitting): "
        + "; ".join(parts)
    )


def _short(commit: str) -> str:
    """A commit as 12 hex digits, keeping a "-dirty" (or any other) suffix: 2b6a71effdd7-dirty."""
    digits, dash, suffix = commit.partition("-")
    return digits[:12] + dash + suffix


def provenance_markdown(info: dict[str, Any], title: str) -> str:
    host = info["host"]
    parts = info.get("stretches") or []
    several = len(info["settings"]) > 1
    settings = "; ".join(
        (f"{', '.join(s['apps'])}: " if several and s.get("apps") else "")
        + f"{s['duration_s']:g} s window, {s['warmup_s']:g} s warm-up, concurrency {s['concurrency']}, "
        f"sidecar burn {s['sidecar_burn']}"
        for s in info["settings"]
    )
    flagged = (
        ", ".join(f"{code} {count}" for code, count in info["flagged_by_flag"].items() if count)
        or "none"
    )
    return "\n".join(
        [
            f"# {title}",
            "",
            f"- preset `{info['preset']}`: {info['conditions']} conditions, {info['runs']} runs "
            f"(repeats {', '.join(map(str, info['repeats']))}); {settings}",
            f"- measured {info['measured_from']} to {info['measured_to']}"
            + (f", in {len(parts)} stretches:" if len(parts) > 1 else ""),
            *(
                [
                    f"  - {s['from']} to {s['to']}: {s['runs']} runs, commit {', '.join(_short(c) for c in s['commits'])}"
                    for s in parts
                ]
                if len(parts) > 1
                else []
            ),
            *(
                [
                    f"- calibration: {info['calibration_runs']} runs of its own, measured {info['calibration_measured_from']} "
                    f"to {info['calibration_measured_to']}"
                ]
                if info.get("calibration_runs")
                else []
            ),
            *(
                [
                    f"- host CPUs busy during the runs (the task included): median {info['host_busy_pct']['median']:g} %, "
                    f"at most {info['host_busy_pct']['max']:g} %"
                ]
                if info.get("host_busy_pct")
                else []
            ),
            *(
                [harness_line(info["harness_between_runs"])]
                if info.get("harness_between_runs")
                else []
            ),
            f"- measured with commit {', '.join(info['measured_with_commit'])}",
            f"- analysed and published at commit {info['commit'][:12]} ({info['commit_subject']})"
            + (", with uncommitted changes" if info["uncommitted_changes"] else ""),
            f"- host: {', '.join(host['cpu_model'])}, {', '.join(host['cpu_count'])} CPUs, kernel "
            f"{', '.join(host['kernel'])}, cgroup v{', '.join(host['cgroup_version'])}, Docker "
            f"{', '.join(host['docker_version'])}, hey {', '.join(host['hey_version'])}",
            f"- images: task {', '.join(i[7:19] for i in info['images']['task'])}; load generator "
            f"{', '.join(i[7:19] for i in info['images']['loadgen'])}",
            f"- requests: {info['requests']['successful']:,} successful, {info['requests']['errors']} errors",
            f"- flagged conditions: {info['flagged_conditions']} of {info['conditions']} ({flagged})",
            "",
        ]
    )


def main(
    preset: str,
    dest: str,
    results: str = "results",
    title: str | None = None,
    measured_commit: str | None = None,
) -> dict[str, Any]:
    source, final = Path(results) / preset, Path(dest)
    if not (source / "summary.parquet").exists():
        raise SystemExit(
            f"{source}/summary.parquet is missing: run snakemake --cores 1 --config preset={preset}"
        )
    # The set is made beside DEST and swapped in whole: a published set never mixes files of two
    # publications (a chart no longer made would otherwise stay) and is never half-written.
    final.parent.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f".{final.name}.new-", dir=final.parent))
    try:
        info = _write_set(source, out, results, preset, title, measured_commit)
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            final.rename(old)
            out.rename(final)
            shutil.rmtree(old)
        else:
            out.rename(final)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    print(
        f"published {source} -> {final}: {info['conditions']} conditions, {info['runs']} runs, "
        f"{info['flagged_conditions']} flagged",
        file=sys.stderr,
    )
    return info


def _write_set(
    source: Path,
    out: Path,
    results: str,
    preset: str,
    title: str | None,
    measured_commit: str | None,
) -> dict[str, Any]:
    out.chmod(0o755)
    # Not snakemake's report.html: it embeds every chart as PNG and HTML and every data file (14 MB
    # for the figure preset). The set gets its own report.html below, made from its files.
    for name in ("summary.csv", "runs_summary.csv"):
        if (source / name).exists():
            shutil.copy2(source / name, out / name)
    # The CPU-budget model's outputs (calibration, model tables and charts, the burn comparison) where made.
    for sub, patterns in (
        ("tables", ("*.md", "*.csv")),
        ("charts", ("*.png", "*.svg")),
        # Its runs' rows too: with them a later version's model can be made from the set alone.
        ("calibration", ("calibration.md", "calibration.csv", "runs_summary.csv")),
        ("model/tables", ("*.md", "*.csv")),
        ("model/charts", ("*.png", "*.svg")),
        ("model/burn", ("*.md", "*.csv", "*.png", "*.svg")),
        ("proxy", ("*.md", "*.csv", "standin.yaml")),
        ("openloop", ("*.md", "*.csv", "*.png", "*.svg")),
    ):
        found = [path for pattern in patterns for path in (source / sub).glob(pattern)]
        if not found:
            continue
        (out / sub).mkdir(parents=True, exist_ok=True)
        for path in found:
            shutil.copy2(path, out / sub / path.name)
    info = provenance(Path(results), preset, measured_commit)
    (out / "provenance.json").write_text(json.dumps(info, indent=2) + "\n")
    title = title or f"How `{preset}` was measured"
    (out / "PROVENANCE.md").write_text(provenance_markdown(info, title))
    set_report.write(out, title.replace("`", ""))
    return info


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset")
    parser.add_argument("dest")
    parser.add_argument("--results", default="results")
    parser.add_argument("--title")
    parser.add_argument(
        "--measured-commit",
        help="the commit the runs were measured with, for run files that do not record it",
    )
    args = parser.parse_args()
    main(args.preset, args.dest, args.results, args.title, args.measured_commit)
