"""A chart's files: <name>.html (Vega-Lite with its JavaScript inlined, so it opens offline), <name>.png (scale 2)
and <name>.svg, each as altair's chart.save writes it, from a spec made once.

Every chart module writes through save_chart, and so do the open-loop comparison's charts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import altair as alt
from altair.vegalite.v6.schema.core import Root

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


def chart_spec(chart: alt.TopLevelMixin) -> dict:
    """The chart's Vega-Lite spec as chart.save makes it (every row inlined, none dropped), with CONFIG.

    Checked against the Vega-Lite schema only when CHECK_ENV is set (the tests set it): the check costs as much
    as making the spec (its every data row is checked) and finds what the tests find, a chart module's mistake."""
    with alt.data_transformers.enable("default"), alt.data_transformers.disable_max_rows():
        spec = chart.to_dict(context={"pre_transform": False}, validate=False)
    spec.setdefault("config", {}).update(CONFIG)
    if os.environ.get(CHECK_ENV, "0") not in ("", "0"):
        Root.validate(spec)
    return spec


def save_chart(
    chart: alt.TopLevelMixin,
    out_dir: Path,
    name: str,
    formats: Iterable[str] = ("html", "png", "svg"),
) -> list[Path]:
    """The chart as name.<format> for each format, each as chart.save(path) would write it.

    The spec is made once and rendered in every format: making it is most of a chart's cost, and chart.save
    made it again per format."""
    from altair.utils.save import save

    spec = _Spec(chart_spec(chart))
    versions = {
        "vega_version": alt.VEGA_VERSION,
        "vegalite_version": alt.VEGALITE_VERSION,
        "vegaembed_version": alt.VEGAEMBED_VERSION,
    }
    written = []
    for fmt in formats:
        path = out_dir / f"{name}.{fmt}"
        with alt.data_transformers.disable_max_rows():
            if fmt == "html":
                save(
                    spec, path, inline=True, **versions
                )  # JavaScript inlined: opens without network
            elif fmt == "png":
                save(spec, path, scale_factor=2, **versions)
            else:
                save(spec, path, **versions)
        written.append(path)
    return written
