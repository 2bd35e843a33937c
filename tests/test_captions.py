"""The report's captions: each workflow/report/*.rst is the caption of a report() in a rule (or the
Snakefile's report:), and each caption a rule names is there (`snakemake --report` fails without it)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULE_FILES = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]


def named_captions() -> set[str]:
    named = set()
    for path in RULE_FILES:
        text = path.read_text()
        # A rule file names its captions relative to workflow/rules/; the Snakefile's report: from the top.
        named |= set(re.findall(r'caption="\.\./report/([^"]+)"', text))
        named |= set(re.findall(r'^report:\s*"workflow/report/([^"]+)"', text, flags=re.M))
    return named


def test_every_caption_file_is_named_by_a_rule_and_every_named_caption_exists():
    files = {path.name for path in (ROOT / "workflow" / "report").iterdir()}
    named = named_captions()
    assert "workflow.rst" in named and "tables.rst" in named, named
    assert sorted(named - files) == [], "captions a rule names that workflow/report/ lacks"
    assert sorted(files - named) == [], "files in workflow/report/ that no report() names"
