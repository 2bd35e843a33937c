"""The README's numbers against the published sets: every ratio in "What to change" is the published mitigations
table's, at the same setup, load and knob, with the same interval and mark; every value with an interval anywhere in
the README is one a published file holds (value, low and high together, to the digits printed)."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sidecar_bench.table_format import ratio_cell

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED_SETS = ROOT / "results" / "published"
PUBLISHED = PUBLISHED_SETS / "mitigations" / "tables" / "mitigations.csv"
APPS = {"Go": "go", "Next.js": "next"}
# "Go 0.25 vCPU + 3 x 15 %": app, vCPU, sidecars and each sidecar's load.
SETUP = re.compile(r"^(Go|Next\.js) ([\d.]+) vCPU \+ (\d) x (\d+) %$")


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table of text as rows of cells (the separator row dropped)."""
    found, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                rows.append(cells)
        elif rows:
            found.append(rows)
            rows = []
    return found


def expected(published: pd.DataFrame, header: str, knob: str) -> str:
    """The cell the published table gives: "RPS ratio [interval] *; P99 ratio [interval] *"."""
    app, vcpu, count, each = SETUP.match(header).groups()
    row = published[
        (published["app"] == APPS[app])
        & (published["vcpu"] == float(vcpu))
        & (published["sidecar_count"] == int(count))
        & (published["total_sidecar_load_pct"] == int(count) * int(each))
        & (published["knobs"] == knob)
    ]
    assert len(row) == 1, f"{header}, {knob}: {len(row)} rows in {PUBLISHED.name}"
    r = row.iloc[0]
    cells = [
        ratio_cell(float(r[p]), float(r[f"{p}_lo"]), float(r[f"{p}_hi"]))
        for p in ("rps_vs_article_settings", "p99_vs_article_settings")
    ]
    return "; ".join(cells).replace("–", "-")


def test_every_ratio_in_the_readmes_what_to_change_is_the_published_tables():
    if not PUBLISHED.exists():
        pytest.skip("no published mitigations set")
    published = pd.read_csv(PUBLISHED)
    text = section((ROOT / "README.md").read_text(), "What to change")
    checked = 0
    for rows in tables(text):
        header, body = rows[0], rows[1:]
        columns = [i for i, cell in enumerate(header) if SETUP.match(cell)]
        assert columns, f"a table in 'What to change' names no setup: {header}"
        for cells in body:
            knob = cells[0].strip("`")
            for i in columns:
                if cells[i] in ("", "-"):
                    continue
                assert cells[i] == expected(published, header[i], knob), (header[i], knob)
                checked += 1
    assert checked >= 9


def test_the_check_reads_a_cell_as_the_table_writes_it():
    published = pd.DataFrame(
        [
            {
                "app": "go",
                "vcpu": 0.25,
                "sidecar_count": 3,
                "total_sidecar_load_pct": 45,
                "knobs": "period 5 ms",
                "rps_vs_article_settings": 1.3,
                "rps_vs_article_settings_lo": 1.16,
                "rps_vs_article_settings_hi": 1.45,
                "p99_vs_article_settings": 0.9,
                "p99_vs_article_settings_lo": 0.5,
                "p99_vs_article_settings_hi": 1.2,
            }
        ]
    )
    assert (
        expected(published, "Go 0.25 vCPU + 3 x 15 %", "period 5 ms")
        == "1.30 [1.16-1.45] *; 0.90 [0.50-1.20]"
    )
    readme = "# x\n\n## What to change\n\n| knob | Go 0.25 vCPU + 3 x 15 % |\n|---|---|\n| `period 5 ms` | a |\n\n## Next\n"
    assert tables(section(readme, "What to change")) == [
        [["knob", "Go 0.25 vCPU + 3 x 15 %"], ["`period 5 ms`", "a"]]
    ]


# "0.61 [0.56-0.67]", "1,960 [1,800-2,100]", "1.27 [1.001-1.61]": a value and its interval as the tables print them.
NUMBER = r"\d[\d,]*(?:\.\d+)?"
INTERVAL = re.compile(rf"(?<![\w.])({NUMBER}) \[({NUMBER})[-–]({NUMBER})\]")


def printed_intervals(text: str) -> list[tuple[str, str, str]]:
    return INTERVAL.findall(text)


def published_intervals(root: Path) -> np.ndarray:
    """Every (value, low, high) of every published CSV: a column X beside X_lo and X_hi, or value, lo and hi
    (the findings table)."""
    found = []
    for path in sorted(root.rglob("*.csv")):
        frame = pd.read_csv(path, low_memory=False)
        triples = [
            [column, f"{column}_lo", f"{column}_hi"]
            for column in frame.columns
            if f"{column}_lo" in frame.columns and f"{column}_hi" in frame.columns
        ]
        if {"value", "lo", "hi"} <= set(frame.columns):
            triples.append(["value", "lo", "hi"])
        for columns in triples:
            triple = frame[columns].apply(pd.to_numeric, errors="coerce")
            found.append(triple.dropna().to_numpy(dtype=float))
    return np.concatenate(found) if found else np.empty((0, 3))


def _matches(printed: str, values: np.ndarray) -> np.ndarray:
    """Which values print as `printed` (rounded to its digits; a half-unit either side)."""
    digits = len(printed.partition(".")[2])
    return np.abs(values - float(printed.replace(",", ""))) <= 0.5 * 10.0**-digits + 1e-9


def is_published(triple: tuple[str, str, str], values: np.ndarray) -> bool:
    hit = np.ones(len(values), dtype=bool)
    for i, printed in enumerate(triple):
        hit &= _matches(printed, values[:, i])
    return bool(hit.any())


def test_every_interval_in_the_readme_is_a_published_one():
    if not PUBLISHED_SETS.exists():
        pytest.skip("no published sets")
    values = published_intervals(PUBLISHED_SETS)
    triples = printed_intervals((ROOT / "README.md").read_text())
    missing = [f"{v} [{lo}-{hi}]" for v, lo, hi in triples if not is_published((v, lo, hi), values)]
    assert not missing, f"README intervals no published file holds: {missing}"
    assert len(triples) >= 20


def test_an_interval_is_found_only_to_the_digits_printed():
    text = "Go 0.61 [0.56-0.67]; Next.js 1,960 [1,800-2,100] RPS; task 1.27 [1.001-1.61], 0.2 [0.1–0.3]."
    assert printed_intervals(text) == [
        ("0.61", "0.56", "0.67"),
        ("1,960", "1,800", "2,100"),
        ("1.27", "1.001", "1.61"),
        ("0.2", "0.1", "0.3"),
    ]
    values = np.array([[0.6149, 0.5551, 0.6701], [1960.4, 1799.6, 2100.0], [1.27, 1.0014, 1.61]])
    assert is_published(("0.61", "0.56", "0.67"), values)
    assert is_published(("1,960", "1,800", "2,100"), values)
    assert is_published(("1.27", "1.001", "1.61"), values)
    assert not is_published(("0.62", "0.56", "0.67"), values)  # 0.6149 prints as 0.61
    assert not is_published(("1.27", "1.002", "1.61"), values)
    assert not is_published(("0.61", "0.56", "1.61"), values)  # each end from another row
