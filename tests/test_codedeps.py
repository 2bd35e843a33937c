"""The project files an analysis script runs, read from its imports."""

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
    write(tmp_path / "pkg" / "charts.py", "import pandas\nfrom .stats import mean\n\ndef plot():\n"
                                          "    from . import late\n")
    write(tmp_path / "pkg" / "stats.py", "from . import charts\n")  # a cycle
    write(tmp_path / "pkg" / "late.py", "")
    write(tmp_path / "pkg" / "unused.py", "")
    found = [path.relative_to(tmp_path).as_posix() for path in project_code(script, tmp_path)]
    assert found == ["report.py", "pkg/__init__.py", "pkg/charts.py", "pkg/late.py", "pkg/stats.py"]


def test_the_chart_script_runs_the_charts_module_and_not_the_runner():
    found = {path.name for path in project_code(ROOT / "scripts" / "plot_charts.py", ROOT / "scripts")}
    assert {"plot_charts.py", "charts.py", "stats.py", "record.py"} <= found
    assert not found & {"runner.py", "job.py", "hosts.py", "lease.py", "run_condition.py"}
