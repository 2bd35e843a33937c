"""The README's "What to change" section against the published mitigations set: every ratio in its tables is the
published table's, at the same setup, load and knob, with the same interval and mark."""

import re
from pathlib import Path

import pandas as pd
import pytest

from sidecar_bench.table_format import ratio_cell

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "results" / "published" / "mitigations" / "tables" / "mitigations.csv"
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
