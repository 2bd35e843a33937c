"""Take over another preset's runs of the same conditions, measured the same way.

    .venv/bin/python scripts/adopt_runs.py FROM_PRESET TO_PRESET [--results results] [--dry-run]

Presets overlap: the `figure` preset's 55 conditions are all in `article`. A run of
one condition, measured with the same load settings (window, warm-up, concurrency,
sidecar burn) on the task image the workflow now uses, is the same measurement
whichever preset asked for it. This copies such runs from results/FROM/runs/ into
results/TO/runs/ (keeping their modification time, so Snakemake counts them as made
after the image), and a following `snakemake --config preset=TO` measures only the
rest. The same holds for the CPU-budget model's calibration: a calibration cell TO
measures on its own (results/TO/calibration/runs/, a cell not in its matrix, such as
the app with no CPU limit) takes FROM's run of that condition, from FROM's matrix or
its calibration. Each run keeps its own metadata (when, on what, with which commit),
so the TO set's provenance shows both measurement windows.

A run is left where it is, with the reason printed, when TO already has that
repetition, TO does not hold the condition or that many repetitions, the load
settings differ (how sidecars burn is no setting of a condition without them), the
run was measured on another task image than the one built now
(results/images/<variant>.json), or it is a failure record. Nothing is
overwritten; each file is written beside its place and renamed into it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from sidecar_bench.calibration import calibration_cells, no_limit_vcpu
from sidecar_bench.conditions import Condition, ConfigError
from sidecar_bench.experiment import load_experiment
from sidecar_bench.record import FailedRunError, RunFileError
from sidecar_bench.runfile import read_meta

ROOT = Path(__file__).resolve().parents[1]


def _experiment(config: dict[str, Any], preset: str):
    try:
        return load_experiment({**config, "preset": preset})
    except ConfigError as err:
        raise SystemExit(f"adopt_runs: {err}") from None


def _built_images(path: Path) -> set[str]:
    """The image ids a results/images/<variant>.json records (one per engine)."""
    if not path.exists():
        return set()
    return set((json.loads(path.read_text()).get("hosts") or {}).values())


def destinations(
    config: dict[str, Any], conditions: list[Condition], target: Path
) -> dict[str, tuple[Condition, Path]]:
    """{id: (condition, folder)} of every run a preset keeps: its matrix's under runs/, and its
    calibration's own cells (not in the matrix) under calibration/runs/."""
    places = {c.id: (c, target / "runs" / c.id) for c in conditions}
    no_limit = no_limit_vcpu(config.get("calibration"))
    for cell in calibration_cells(conditions, no_limit):
        cid = cell.condition.id
        if not cell.in_matrix:
            places[cid] = (cell.condition, target / "calibration" / "runs" / cid)
    return places


def _source_runs(source: Path) -> list[Path]:
    """FROM's run files: its matrix's and its calibration's own."""
    found = []
    for folder in (source / "runs", source / "calibration" / "runs"):
        found.extend(sorted(folder.glob("*/rep*.parquet")))
    return found


def plan(
    config: dict[str, Any], source: str, target: str, results: Path
) -> tuple[list[tuple[Path, Path]], Counter]:
    """[(from, to)] of the runs TO can take over, and a count of the runs left, by reason."""
    want = _experiment(config, target)
    places = destinations(config, want.conditions, results / target)
    conditions = {cid: condition for cid, (condition, _) in places.items()}
    adopt, left = [], Counter()
    for path in _source_runs(results / source):
        cid, repeat = path.parent.name, int(path.stem.removeprefix("rep"))
        if cid not in conditions:
            left[f"not a condition of {target}"] += 1
            continue
        dest = places[cid][1] / path.name
        if repeat > want.repeats:
            left[f"repetition above {target}'s {want.repeats}"] += 1
            continue
        if dest.exists():
            left[f"{target} has it already"] += 1
            continue
        try:
            meta = read_meta(path)
        except FailedRunError:
            left["a failure record"] += 1
            continue
        except RunFileError:
            left["not a readable run file"] += 1
            continue
        load = want.load.for_app(
            conditions[cid].app
        ).measured()  # the settings that can change a measurement
        if not conditions[cid].sidecar_count:
            load.pop("sidecar_burn", None)  # how sidecars burn changes nothing where there are none
        measured = {
            key: meta["load"].get(key, "wall" if key == "sidecar_burn" else None) for key in load
        }
        if measured != load:
            left["other load settings"] += 1
            continue
        if meta["condition"] != conditions[cid].as_dict():
            left["another condition under the same id"] += 1
            continue
        image = results / "images" / f"{conditions[cid].variant}.json"
        if (meta.get("environment") or {}).get("image_id") not in _built_images(image):
            left["measured on another task image than the one built now"] += 1
            continue
        if image.stat().st_mtime_ns > path.stat().st_mtime_ns:
            # Snakemake would measure it again (its image record is newer).
            left["older than the task image's record"] += 1
            continue
        adopt.append((path, dest))
    return adopt, left


def copy_run(path: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.adopting-{os.getpid()}")
    try:
        shutil.copy2(path, part)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)


def main(
    source: str,
    target: str,
    results: str = "results",
    config_file: str | Path = ROOT / "config.yaml",
    dry_run: bool = False,
) -> tuple[list[tuple[Path, Path]], Counter]:
    if source == target:
        raise SystemExit(f"adopt_runs: FROM and TO are both {source!r}")
    config = yaml.safe_load(Path(config_file).read_text())
    adopt, left = plan(config, source, target, Path(results))
    for path, dest in adopt:
        if not dry_run:
            copy_run(path, dest)
    verb = "would take over" if dry_run else "took over"
    print(f"adopt_runs: {target} {verb} {len(adopt)} runs of {source}", file=sys.stderr)
    for reason, count in sorted(left.items()):
        print(f"  left {count}: {reason}", file=sys.stderr)
    return adopt, left


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", metavar="FROM_PRESET")
    parser.add_argument("target", metavar="TO_PRESET")
    parser.add_argument("--results", default="results")
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be taken over; copy nothing"
    )
    args = parser.parse_args()
    main(args.source, args.target, args.results, args.config, args.dry_run)
