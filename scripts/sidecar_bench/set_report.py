"""A published set's own report: one self-contained HTML page made from the set's files.

`snakemake --report` embeds every chart as PNG and HTML and every data file (14 MB for the
`figure` preset), too heavy to keep in git beside the set. This page is made from what a
published set already holds: its provenance first (what measured it, when, on what, how many
cells were flagged), then every chart as its SVG (embedded as a data URI: nothing is fetched,
and the charts' internal ids cannot clash) and every table as it reads in Markdown. A few MB,
and it opens from a file or a mail attachment.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

# The set's sections, in reading order: (heading, folder, what it holds).
SECTIONS = (
    ("Charts", "charts", "charts"),
    ("Tables", "tables", "tables"),
    ("Calibration: the cost of a request, each app alone", "calibration", "tables"),
    ("The CPU-budget model", "model/charts", "charts"),
    ("The CPU-budget model: tables", "model/tables", "tables"),
    ("Sidecars that burn what they claim", "model/burn", "both"),
    ("A real proxy against the busy-loop stand-in", "proxy", "tables"),
    ("Open loop beside the closed loop", "openloop", "both"),
)

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; margin: 0 auto;
       max-width: 1280px; padding: 1.5rem 2rem 4rem; }
h1 { font-size: 1.7rem; border-bottom: 1px solid #d0d7de; padding-bottom: .4rem; }
h2 { font-size: 1.35rem; margin-top: 2.5rem; border-bottom: 1px solid #d0d7de; padding-bottom: .3rem; }
h3 { font-size: 1.1rem; margin-top: 1.8rem; }
nav ul { columns: 2; }
table { border-collapse: collapse; margin: .6rem 0; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 3px 7px; text-align: right; white-space: nowrap; }
th { background: #f6f8fa; }
td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fbfcfd; }
.scroll { overflow-x: auto; }
figure { margin: 1rem 0 2rem; }
figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figcaption { color: #59636e; font-size: 13px; }
code { background: #f6f8fa; padding: 0 3px; border-radius: 3px; }
li { margin: .15rem 0; }
"""


def _inline(text: str) -> str:
    """Markdown's inline code and links, everything else escaped."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if len(part) >= 2 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        escaped = html.escape(part, quote=False)
        # Links to the set's own files stay as text: the page stands alone.
        out.append(re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1", escaped))
    return "".join(out)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def markdown_to_html(text: str, shift: int = 0) -> str:
    """The Markdown the project writes (headings, bullet lists, pipe tables, paragraphs) as HTML.

    shift: how many levels to push headings down (a table's own "#" heading inside a section).
    """
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("#"):
            level = min(6, len(line) - len(line.lstrip("#")) + shift)
            out.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
            i += 1
        elif line.lstrip().startswith("|"):
            block = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                block.append(lines[i])
                i += 1
            header, body = (
                _cells(block[0]),
                [r for r in block[1:] if not re.fullmatch(r"[\s|:\-]+", r)],
            )
            rows = "".join(
                "<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in _cells(r)) + "</tr>"
                for r in body
            )
            out.append(
                '<div class="scroll"><table><thead><tr>'
                + "".join(f"<th>{_inline(c)}</th>" for c in header)
                + f"</tr></thead><tbody>{rows}</tbody></table></div>"
            )
        elif re.match(r"\s*[-*] ", line):
            items = []
            while (
                i < len(lines) and lines[i].strip() and not lines[i].lstrip().startswith(("#", "|"))
            ):
                if re.match(r"\s*[-*] ", lines[i]):
                    items.append(re.sub(r"^\s*[-*] ", "", lines[i]))
                elif items:  # a continued item
                    items[-1] += " " + lines[i].strip()
                i += 1
            out.append("<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in items) + "</ul>")
        else:
            para = []
            while (
                i < len(lines)
                and lines[i].strip()
                and not lines[i].lstrip().startswith(("#", "|", "- ", "* "))
            ):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{_inline(' '.join(para))}</p>")
    return "\n".join(out)


MIME = {".svg": "image/svg+xml", ".png": "image/png"}


def _chart(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    title = path.stem.replace("_", " ")
    return (
        f'<figure id="{html.escape(path.parent.name)}-{html.escape(path.stem)}">'
        f'<img alt="{html.escape(title)}" src="data:{MIME[path.suffix]};base64,{data}">'
        f"<figcaption>{html.escape(path.name)}</figcaption></figure>"
    )


def chart_paths(folder: Path) -> list[Path]:
    """Every chart in folder as the page shows it: its SVG, or its PNG where no SVG was made."""
    return sorted(folder.glob("*.svg")) + [
        p for p in sorted(folder.glob("*.png")) if not p.with_suffix(".svg").exists()
    ]


def page_charts(set_dir: Path) -> list[Path]:
    """Every chart file render() embeds for the set in set_dir, in the page's order."""
    return [
        path
        for _, sub, kind in SECTIONS
        if kind in ("charts", "both") and (Path(set_dir) / sub).is_dir()
        for path in chart_paths(Path(set_dir) / sub)
    ]


def _charts(folder: Path) -> list[tuple[str, str]]:
    """(name, html) for every chart in folder (chart_paths)."""
    return [(path.stem, _chart(path)) for path in chart_paths(folder)]


def _tables(folder: Path) -> list[tuple[str, str]]:
    return [
        (path.stem, markdown_to_html(path.read_text(), shift=2))
        for path in sorted(folder.glob("*.md"))
    ]


def render(set_dir: Path, title: str) -> str:
    """The whole page for the published set in set_dir (its PROVENANCE.md, charts and tables)."""
    set_dir = Path(set_dir)
    provenance = set_dir / "PROVENANCE.md"
    body, nav = [], []
    if provenance.exists():
        text = provenance.read_text()
        # The provenance's own heading is the page's title.
        text = "\n".join(line for line in text.splitlines() if not line.startswith("# "))
        nav.append('<li><a href="#provenance">Provenance</a></li>')
        body.append('<h2 id="provenance">Provenance</h2>' + markdown_to_html(text, shift=2))
    for number, (heading, sub, kind) in enumerate(SECTIONS):
        folder = set_dir / sub
        if not folder.is_dir():
            continue
        parts = []
        if kind in ("charts", "both"):
            parts += [html_ for _, html_ in _charts(folder)]
        if kind in ("tables", "both"):
            parts += [
                f'<section id="{html.escape(sub)}-{html.escape(name)}">{html_}</section>'
                for name, html_ in _tables(folder)
            ]
        if not parts:
            continue
        anchor = f"s{number}"
        nav.append(f'<li><a href="#{anchor}">{html.escape(heading)}</a></li>')
        body.append(f'<h2 id="{anchor}">{html.escape(heading)}</h2>' + "\n".join(parts))
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            "<p>Every chart and table of this published set, with its provenance. The numbers are in the "
            "set's <code>summary.csv</code>; values in [brackets] are 95 % intervals, letters after a value are "
            "validity flags (legend under each table).</p>",
            f"<nav><ul>{''.join(nav)}</ul></nav>",
            *body,
            "</body></html>",
            "",
        ]
    )


def title_of(set_dir: Path) -> str:
    """The set's title: its PROVENANCE.md's heading, without Markdown's code marks."""
    provenance = Path(set_dir) / "PROVENANCE.md"
    lines = provenance.read_text().splitlines() if provenance.exists() else []
    if lines and lines[0].startswith("# "):
        return lines[0].lstrip("# ").strip().replace("`", "")
    return f"How {Path(set_dir).name} was measured"


def replace_provenance_lines(set_dir: Path, prefixes: tuple[str, ...], lines: list[str]) -> bool:
    """PROVENANCE.md with its lines starting with any of prefixes replaced by lines, at its end; False if the
    set has none."""
    provenance = Path(set_dir) / "PROVENANCE.md"
    if not provenance.exists():
        return False
    kept = [line for line in provenance.read_text().splitlines() if not line.startswith(prefixes)]
    while kept and not kept[-1].strip():
        kept.pop()
    provenance.write_text("\n".join([*kept, *lines, ""]))
    return True


def write(set_dir: Path, title: str) -> Path:
    path = Path(set_dir) / "report.html"
    path.write_text(render(set_dir, title))
    return path
