"""A chart's files: <name>.html (Vega-Lite with its JavaScript inlined, so it opens offline), <name>.png (scale 2)
and <name>.svg, each as altair's chart.save writes it, from a spec made once.

Every chart module writes through save_chart, and so do the open-loop comparison's charts.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import altair as alt
from altair.vegalite.v6.schema.core import Root

from . import render_worker
from .vlspec import ChartLike, Compound, altair_spec

# Set (to anything but "" or "0") by the test suite for itself and the workflows it starts: every spec written is
# checked against the Vega-Lite schema.
CHECK_ENV = "SIDECAR_BENCH_CHECK_SPECS"


class _Spec:
    """A chart's Vega-Lite spec, made once: what altair's save asks of a chart (to_dict) for every format."""

    def __init__(self, spec: dict):
        self.spec = spec

    def to_dict(self, *args, **kwargs) -> dict:
        return self.spec


# The charts' type sizes, as chart.configure_axis/_title/_legend(**...) would set them (each replaces its part of the
# config; in the order altair writes them). Set in the spec: each configure_* call copied the whole chart first.
CONFIG = {
    "axis": {"labelFontSize": 11, "titleFontSize": 12},
    "legend": {"labelFontSize": 11, "titleFontSize": 12},
    "title": {"fontSize": 15, "subtitleFontSize": 11},
}


def chart_spec(chart: ChartLike) -> dict:
    """The chart's Vega-Lite spec as chart.save makes it (every row inlined, none dropped), with CONFIG.

    Checked against the Vega-Lite schema only when CHECK_ENV is set (the tests set it): it finds what the tests
    find, a chart module's mistake. The check sees each dataset's first rows only (schema_view)."""
    spec = chart.to_dict(validate=False) if isinstance(chart, Compound) else altair_spec(chart)
    spec.setdefault("config", {}).update(CONFIG)
    if os.environ.get(CHECK_ENV, "0") not in ("", "0"):
        Root.validate(schema_view(spec))
    return spec


# Rows of each dataset the schema check sees. The schema asks only that a dataset's rows be objects (or all
# numbers, strings or booleans), and rows made from one data frame all have its shape; the check walked every row
# through each of those alternatives, which cost more than making and rendering the chart.
CHECKED_ROWS = 3


def schema_view(spec: Any) -> Any:
    """The spec with each dataset (top-level `datasets`, inline `data.values`) cut to its first CHECKED_ROWS rows;
    the spec itself is left as it is."""
    if isinstance(spec, list):
        return [schema_view(item) for item in spec]
    if not isinstance(spec, dict):
        return spec
    view = {}
    for key, value in spec.items():
        if key == "datasets" and isinstance(value, dict):
            view[key] = {
                name: rows[:CHECKED_ROWS] if isinstance(rows, list) else rows
                for name, rows in value.items()
            }
        elif key == "data" and isinstance(value, dict) and isinstance(value.get("values"), list):
            view[key] = {**value, "values": value["values"][:CHECKED_ROWS]}
        else:
            view[key] = schema_view(value)
    return view


def bundle_cache_dir() -> Path:
    """Where vl-convert's JavaScript bundle is kept between processes ($XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sidecar-bench"


def javascript_bundle() -> str:
    """vl-convert's Vega-Embed bundle for altair's Vega-Lite version, as chart.save(inline=True) inlines it.

    vl-convert bundles it afresh in every process (2.3 s here, about the time of rendering two charts); it
    depends only on vl-convert's version and the Vega-Lite version, which name the cached file."""
    import vl_convert
    from altair.utils._importers import vl_version_for_vl_convert

    vl_version = vl_version_for_vl_convert()
    path = bundle_cache_dir() / f"vega-embed-vl-convert-{vl_convert.__version__}-{vl_version}.js"
    try:
        cached = path.read_text(encoding="utf-8")
        if cached:
            return cached
    except OSError:
        pass  # not made yet, or unreadable: make it
    bundle = vl_convert.javascript_bundle(vl_version=vl_version)
    try:  # written whole or not at all: a reader never sees part of it
        path.parent.mkdir(parents=True, exist_ok=True)
        render_worker.write_whole(path, bundle.encode("utf-8"))
    except OSError:
        pass  # no cache (a read-only home): the next process bundles again
    return bundle


class _InlineTemplate:
    """altair's inline HTML template (chart.save(inline=True)) with the bundle from javascript_bundle."""

    def render(self, **kwargs: Any) -> str:
        from altair.utils.html import TEMPLATES

        return TEMPLATES["inline"].render(**kwargs, vegaembed_script=javascript_bundle())


def save_chart(
    chart: ChartLike,
    out_dir: Path,
    name: str,
    formats: Iterable[str] = ("html", "png", "svg"),
) -> list[Path]:
    """The chart as name.<format> for each format, each as chart.save(path) would write it.

    The spec is made once and rendered in every format: making it is most of a chart's cost, and chart.save
    made it again per format. Inside rendering_in_background, the SVG and PNG are drawn by the second process
    and are whole once the block has ended."""
    from altair.utils.save import save

    spec = _Spec(chart_spec(chart))
    versions = {
        "vega_version": alt.VEGA_VERSION,
        "vegalite_version": alt.VEGALITE_VERSION,
        "vegaembed_version": alt.VEGAEMBED_VERSION,
    }
    formats = list(formats)
    paths = {fmt: out_dir / f"{name}.{fmt}" for fmt in formats}
    drawn = {fmt: paths.get(fmt) for fmt in ("svg", "png")}
    if _background is not None and any(drawn.values()):
        _background.draw(
            spec.spec, name, _vl_version(), drawn["svg"], drawn["png"], PNG_SCALE, PNG_PPI
        )
    elif any(drawn.values()):
        # vl-convert makes a PNG by rasterising the chart's SVG: the chart is drawn once for both.
        svg = _svg(spec.spec)
        if drawn["png"]:
            drawn["png"].write_bytes(_png(svg))
        if drawn["svg"]:
            drawn["svg"].write_text(svg, encoding="utf-8")
    for fmt, path in paths.items():
        if fmt == "html":  # JavaScript inlined: opens without network
            with alt.data_transformers.disable_max_rows():
                save(spec, path, template=_InlineTemplate(), **versions)
        elif fmt not in drawn:  # any other format altair saves
            with alt.data_transformers.disable_max_rows():
                save(spec, path, **versions)
    return list(paths.values())


_background: render_worker.Worker | None = None


@contextmanager
def rendering_in_background(enabled: bool | None = None) -> Iterator[None]:
    """Within the block, save_chart hands each chart's SVG and PNG to a second process (render_worker) and goes
    on to the next chart; the block's end waits until every file is written and raises if any was not. The
    HTML is written at once. enabled: None draws in the background where this process may use two CPUs; False
    draws in this process, as outside the block. The files are byte for byte those drawn in this process."""
    global _background
    started = render_worker.take_started()
    if _background is not None or not (render_worker.two_cpus() if enabled is None else enabled):
        if started is not None:
            started.abandon()
        yield
        return
    _background = started or render_worker.Worker()
    try:
        yield
        _background.finish()
    finally:
        worker, _background = _background, None
        worker.abandon()


PNG_SCALE = 2
PNG_PPI = 72  # what chart.save writes a PNG at unless told otherwise


def _vl_version() -> str:
    from altair.utils._importers import vl_version_for_vl_convert

    return vl_version_for_vl_convert()


def _svg(spec: dict) -> str:
    """The chart's SVG as chart.save(path.svg) makes it (vl-convert, altair's Vega-Lite version)."""
    import vl_convert
    from altair.utils._importers import vl_version_for_vl_convert

    return vl_convert.vegalite_to_svg(spec, vl_version=vl_version_for_vl_convert())


def _png(svg: str) -> bytes:
    """The PNG chart.save(path.png, scale_factor=PNG_SCALE) makes, from the chart's SVG: vl-convert's PNG is
    that SVG rasterised (the save test compares the bytes)."""
    import vl_convert

    return vl_convert.svg_to_png(svg, scale=PNG_SCALE, ppi=PNG_PPI)
