"""Run the real Snakefile in a copy of the project, and read what it plans."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
# Build output and installed packages are not part of the project: never copied.
IGNORED = shutil.ignore_patterns(
    "node_modules", ".next", "__pycache__", ".pytest_cache", "app-next-build"
)


def copy_project(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("profiles", "workflow", "scripts", "task-image"):
        shutil.copytree(ROOT / name, dest / name, ignore=IGNORED)
    return dest


def write_config(workdir: Path, **changes) -> dict:
    """Rewrite the copy's config.yaml with top-level keys replaced."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config.update(changes)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return config


@dataclass
class Plan:
    returncode: int
    output: str
    jobs: Counter
    conditions: set
    variants: set
    repeats: set

    @property
    def nothing_to_do(self) -> bool:
        return "Nothing to be done" in self.output


def snakemake(
    workdir: Path, *args: str, cores: int = 1, timeout: float = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            SNAKEMAKE,
            "--cores",
            str(cores),
            "--directory",
            str(workdir),
            "--snakefile",
            str(workdir / "Snakefile"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def dry_run(workdir: Path, *args: str) -> Plan:
    done = snakemake(workdir, "--dry-run", *args, timeout=120)
    output = done.stdout + done.stderr
    jobs: Counter = Counter()
    in_table = False
    for line in output.splitlines():
        if line.startswith("job") and "count" in line:
            in_table = True
            continue
        if in_table:
            match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
            if match and match.group(1) != "total":
                jobs[match.group(1)] = int(match.group(2))
            elif line.strip().startswith("total"):
                in_table = False
    conditions = set(re.findall(r"condition=([\w.-]+)", output))
    variants = set(re.findall(r"variant=([\w-]+)", output))
    repeats = {int(rep) for rep in re.findall(r"repeat=(\d+)", output)}
    return Plan(done.returncode, output, jobs, conditions, variants, repeats)


def pretend_finished(workdir: Path, *args: str) -> None:
    """Every output of the plan, as after a complete run, without measuring anything.

    Snakemake's --touch only touches outputs that exist: each is first made (empty; a directory where the
    path has no suffix), then --touch gives them the order of the DAG and records the jobs' metadata (params,
    input checksums), as a real run does."""
    summary = snakemake(workdir, "--summary", *args, timeout=120)
    assert summary.returncode == 0, summary.stdout + summary.stderr
    lines = summary.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("output_file\t"))
    for line in lines[header + 1 :]:
        path = workdir / line.split("\t")[0]
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:
            path.mkdir(parents=True, exist_ok=True)
    touched = snakemake(workdir, "--touch", *args, timeout=120)
    assert touched.returncode == 0, touched.stdout + touched.stderr
