"""The promises of the README and docs/, and the tests that keep them: the table "Promises and their tests" of
docs/development.md.

Each row quotes a promise ("..."), links the heading of the page it stands under, and names the tests that fail
when the promise breaks. This fails when a row loses its tests, when a named test leaves its file, and when a
promise leaves its page: its heading renamed or gone, or its words no longer under that heading.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from test_docs import ROOT, anchors, slug

DEVELOPMENT = ROOT / "docs" / "development.md"
TABLE_HEADING = "## Promises and their tests"
# The rows the table had when it was written. A promise may move to another row; the count only goes down
# with a reason given here.
LEAST_ROWS = 174

LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]*)#([^)\s]+)\)")
QUOTE = re.compile(r'"([^"]+)"')
NODE = re.compile(r"`(tests/[\w/]+\.py)::((?:\w+::)?test_\w+)`")
HEADING = re.compile(r"(#{1,6}) (.*)")


@dataclass(frozen=True)
class Row:
    line: int
    promise: str
    tests: str

    def where(self) -> str:
        return f"docs/development.md:{self.line}"


def table_rows() -> list[Row]:
    """The body rows of the table under TABLE_HEADING (its header and separator left out)."""
    lines = DEVELOPMENT.read_text().splitlines()
    start = lines.index(TABLE_HEADING)
    rows = []
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        if not line.startswith("|") or re.fullmatch(r"\|[-| ]+\|", line.strip()):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 2, (
            f"docs/development.md:{number}: a row has two cells, promise and test: {line}"
        )
        if cells == ["promise", "test"]:
            continue
        rows.append(Row(number, *cells))
    return rows


def normalised(text: str) -> str:
    return " ".join(text.split())


@cache
def section(page: Path, anchor: str) -> str | None:
    """The Markdown under the heading whose anchor this is, down to the next heading of its level or above."""
    found, level, fence, kept = False, 0, False, []
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        heading = None if fence else HEADING.fullmatch(line)
        if heading and found and len(heading.group(1)) <= level:
            break
        if found:
            kept.append(line)
        elif heading and slug(heading.group(2)) == anchor:
            found, level = True, len(heading.group(1))
    return normalised("\n".join(kept)) if found else None


@cache
def defined_tests(path: Path) -> set[str]:
    """test_* functions at the top of a test file, and Class::test_* methods of its classes."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
            "test_"
        ):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                and item.name.startswith("test_")
            }
    return names


def test_the_table_has_its_rows_and_every_row_names_its_tests():
    rows = table_rows()
    assert len(rows) >= LEAST_ROWS, f"{len(rows)} promises in the table, it had {LEAST_ROWS}"
    bad = []
    for row in rows:
        if not NODE.search(row.tests):
            bad.append(f"{row.where()}: no test for {row.promise}")
        # Only node ids, so that a misspelt one is not passed over.
        elif NODE.sub("", row.tests).replace(",", "").strip():
            bad.append(
                f"{row.where()}: not a node id (`tests/<file>.py::<test>`): {NODE.sub('', row.tests)}"
            )
    assert not bad, "\n".join(bad)


def test_every_promise_is_quoted_under_the_heading_it_links():
    bad = []
    for row in table_rows():
        links, quotes = LINK.findall(row.promise), QUOTE.findall(row.promise)
        if len(links) != 1 or not quotes:
            bad.append(
                f'{row.where()}: a promise is a quote ("...") and one link to its heading: {row.promise}'
            )
            continue
        target, anchor = links[0]
        page = (DEVELOPMENT.parent / target).resolve() if target else DEVELOPMENT
        if not page.is_file():
            bad.append(f"{row.where()}: no page {target}")
        elif anchor not in anchors(page):
            bad.append(f"{row.where()}: no heading #{anchor} in {page.relative_to(ROOT)}")
        else:
            text = section(page, anchor)
            bad += [
                f'{row.where()}: {page.relative_to(ROOT)}#{anchor} no longer says "{quote}"'
                for quote in quotes
                if normalised(quote) not in text
            ]
    assert not bad, "\n".join(bad)


def test_every_named_test_is_defined_in_its_file():
    bad = []
    for row in table_rows():
        for file, name in NODE.findall(row.tests):
            path = ROOT / file
            if not path.is_file():
                bad.append(f"{row.where()}: no test file {file}")
            elif name not in defined_tests(path):
                bad.append(f"{row.where()}: {file} defines no {name}")
    assert not bad, "\n".join(bad)


def test_a_section_ends_at_the_next_heading_of_its_level_and_skips_code_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n\n## One: `a`\n\nfirst\nwords\n\n```sh\n# not a heading\n```\n\n### Inner\n\ninner\n\n"
        "## Two\n\nsecond\n"
    )
    assert section(page, "one-a") == "first words ```sh # not a heading ``` ### Inner inner"
    assert section(page, "two") == "second"
    assert section(page, "three") is None
