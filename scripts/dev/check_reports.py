"""Opens each published set's report.html in a real browser with no network, and checks that every chart shows.

    .venv/bin/python scripts/dev/check_reports.py [results/published/<set> ...] [--screenshots DIR]

Default: every set under results/published/ that has a report.html. For each, a copy of the page gets, at the
top of its head, a Content-Security-Policy that lets nothing load but data: images and the page's own inline
style and script (anything else it asks for is blocked and reported), and a script that, once the page has
loaded, counts its images and those that did not decode. Headless Chromium (Debian's package `chromium`; not
installed by the set-up) loads the copy from a file in a network namespace of its own (`unshare --net`, as
root), so nothing could be fetched even past the policy, and prints the page's DOM, from which the counts are
read. A set passes when the page shows exactly the charts set_report embeds for it (set_report.page_charts),
all decoded, none with a log axis that has no scale (its domain from 0: the chart draws next to nothing, yet
decodes), and asked for nothing. Prints one line per set and exits 1 if any failed. --screenshots also
writes a PNG of each page's first screen, to look at.

The report's page is plain HTML (sidecar_bench.set_report), so this checks what a reader gets: a browser,
a file, no network. Not part of the test suite: it needs Chromium.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sidecar_bench import set_report

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "results" / "published"
BROWSER = "chromium"
# As the machine's own browser tests start it: no sandbox as root, nothing in the background that reaches out.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=10000",
]
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
PROBE = (
    """<meta http-equiv="Content-Security-Policy" content="%s">
<script>
var blockedByCheck = [];
document.addEventListener("securitypolicyviolation", function (e) { blockedByCheck.push(e.blockedURI); });
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                     .map(function (i) { return i.alt; });
  var out = document.createElement("pre");
  out.id = "report-check";
  out.textContent = JSON.stringify({images: images.length, broken: broken, blocked: blockedByCheck});
  document.body.appendChild(out);
});
</script>
"""
    % POLICY
)

RESULT = re.compile(r'<pre id="report-check">(.*?)</pre>', re.S)


def probed(page: str) -> str:
    """The page with the policy and the counting script first in its head."""
    head = re.search(r"<head[^>]*>", page)
    if head is None:
        raise ValueError("no <head> in the page")
    return page[: head.end()] + PROBE + page[head.end() :]


def read_result(dom: str) -> dict:
    """The counts the script left in the DOM Chromium printed."""
    found = RESULT.search(dom)
    if found is None:
        raise ValueError("the page's check did not run (no report-check element in the DOM)")
    return json.loads(html.unescape(found.group(1)))


def verdict(result: dict, expected: int) -> list[str]:
    """What is wrong with a page's counts (nothing: an empty list)."""
    problems = []
    if result["images"] != expected:
        problems.append(f"{result['images']} images on the page, {expected} charts in the set")
    if result["broken"]:
        problems.append(f"not shown: {', '.join(result['broken'])}")
    if result["blocked"]:
        problems.append(
            f"asked for what a file offline cannot give: {', '.join(result['blocked'])}"
        )
    return problems


# vl-convert labels each axis of an SVG: "Y-axis titled 'P99 (ms, log)' for a log scale with values from 0 to 913".
LOG_AXIS = re.compile(
    r"aria-label=\"[XY]-axis titled '([^\"]*?)' for a log scale with values from (-?[\d.,]+)[ %]"
)


def flat_log_axes(svg: str) -> list[str]:
    """The titles of a chart's log axes whose domain starts at or below 0: such an axis draws no scale, and the
    chart shows little or nothing (an interval's low end of 0 did that to published charts)."""
    return [title for title, low in LOG_AXIS.findall(svg) if float(low.replace(",", "")) <= 0]


def chart_problems(set_dir: Path) -> list[str]:
    """Charts of the set (the SVGs its page embeds) with a log axis without a scale."""
    problems = []
    for path in set_report.page_charts(set_dir):
        if path.suffix != ".svg":
            continue  # a PNG is shown where the set has no SVG of the chart: not read here
        flat = flat_log_axes(path.read_text(encoding="utf-8"))
        if flat:
            problems.append(f"{path.relative_to(set_dir)}: no scale on log axis {', '.join(flat)}")
    return problems


def browse(page: Path, work: Path, screenshot: Path | None = None) -> str:
    """Chromium's DOM of the page after load, the browser in a network namespace of its own."""
    offline = ["unshare", "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    command = [*offline, BROWSER, *FLAGS, f"--user-data-dir={work / 'profile'}"]
    if screenshot is not None:
        subprocess.run(
            [*command, f"--screenshot={screenshot}", "--window-size=1400,1800", page.as_uri()],
            capture_output=True,
            timeout=120,
            check=True,
        )
    out = subprocess.run(
        [*command, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout


def check(set_dir: Path, screenshots: Path | None = None) -> tuple[dict, list[str]]:
    expected = len(set_report.page_charts(set_dir))
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-report-check-") as tmp:
        work = Path(tmp)
        page = work / "report.html"
        page.write_text(probed((set_dir / "report.html").read_text(encoding="utf-8")))
        shot = screenshots / f"{set_dir.name}.png" if screenshots else None
        result = read_result(browse(page, work, shot))
    return result, verdict(result, expected) + chart_problems(set_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", help="published sets (default: all with a report.html)")
    parser.add_argument("--screenshots", help="write a PNG of each page's first screen here")
    args = parser.parse_args(argv)
    if shutil.which(BROWSER) is None:
        raise SystemExit(f"{BROWSER} not found: apt-get install chromium")
    sets = [Path(s) for s in args.sets] or sorted(p.parent for p in PUBLISHED.glob("*/report.html"))
    screenshots = Path(args.screenshots) if args.screenshots else None
    if screenshots:
        screenshots.mkdir(parents=True, exist_ok=True)
    failed = 0
    for set_dir in sets:
        result, problems = check(set_dir, screenshots)
        status = "ok" if not problems else "FAILED: " + "; ".join(problems)
        print(
            f"{set_dir.name}: {result['images']} images on the page, {len(result['broken'])} not shown, "
            f"{len(result['blocked'])} requests blocked: {status}"
        )
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
