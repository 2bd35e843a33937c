"""The project files an analysis script runs, read from its imports."""

import re
from pathlib import Path

from sidecar_bench.codedeps import project_code

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_imports_are_followed_through_modules_relative_imports_and_functions(tmp_path):
    script = write(tmp_path / "report.py", "import json\nfrom pkg.charts import plot\n")
    write(tmp_path / "pkg" / "__init__.py", "")
    write(
        tmp_path / "pkg" / "charts.py",
        "import pandas\nfrom .stats import mean\n\ndef plot():\n    from . import late\n",
    )
    write(tmp_path / "pkg" / "stats.py", "from . import charts\n")  # a cycle
    write(tmp_path / "pkg" / "late.py", "")
    write(tmp_path / "pkg" / "unused.py", "")
    found = [path.relative_to(tmp_path).as_posix() for path in project_code(script, tmp_path)]
    assert found == ["report.py", "pkg/__init__.py", "pkg/charts.py", "pkg/late.py", "pkg/stats.py"]


def test_the_chart_script_runs_the_charts_module_and_not_the_runner():
    found = {
        path.name
        for path in project_code(ROOT / "workflow" / "scripts" / "plot_charts.py", ROOT / "scripts")
    }
    assert {"plot_charts.py", "charts.py", "stats.py", "record.py"} <= found
    assert not found & {
        "runner.py",
        "measurement.py",
        "task_measurement.py",
        "job.py",
        "hosts.py",
        "lease.py",
        "run_condition.py",
    }


CHART_MODULES = {
    "charts.py",
    "chart_files.py",
    "model_charts.py",
    "burn_charts.py",
    "layout_charts.py",
    "mitigation_charts.py",
}
TABLE_MODULES = {"tables.py", "mitigations.py", "model_tables.py", "burn_tables.py"}


def code_of(script: str) -> list[Path]:
    return project_code(ROOT / "workflow" / "scripts" / f"{script}.py", ROOT / "scripts")


def test_the_tables_run_no_chart_code_and_the_charts_no_table_code():
    # The rules list this code as their inputs: editing a chart module must remake no table, and the reverse.
    for script in ("make_tables", "calibrate"):
        found = code_of(script)
        names = {path.name for path in found}
        assert "cells.py" in names and "table_format.py" in names, script
        assert not names & CHART_MODULES, script
        assert not [
            path.name
            for path in found
            if re.search(r"^\s*(import|from)\s+altair\b", path.read_text(), re.MULTILINE)
        ], script
    assert {"tables.py", "mitigations.py"} <= {path.name for path in code_of("make_tables")}
    charts = {path.name for path in code_of("plot_charts")}
    assert {
        "charts.py",
        "chart_files.py",
        "layout_charts.py",
        "mitigation_charts.py",
        "cells.py",
    } <= charts
    assert not charts & TABLE_MODULES


def test_the_workflows_library_goes_first_on_the_jobs_path_once():
    from sidecar_bench.codedeps import library_first_for_jobs

    environ = {"PYTHONPATH": "/elsewhere:/copy/scripts:/more"}
    assert library_first_for_jobs("/copy/scripts", environ) == "/copy/scripts:/elsewhere:/more"
    assert library_first_for_jobs("/copy/scripts", environ) == "/copy/scripts:/elsewhere:/more"
    assert library_first_for_jobs("/copy/scripts", {}) == "/copy/scripts"
