"""A chart's files: <name>.html (Vega-Lite with its JavaScript inlined, so it opens offline), <name>.png (scale 2)
and <name>.svg, each as altair's chart.save writes it, from a spec made once.

Every chart module writes through save_chart, and so do the open-loop comparison's charts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import altair as alt


class _Spec:
    """A chart's Vega-Lite spec, made once: what altair's save asks of a chart (to_dict) for every format."""

    def __init__(self, spec: dict):
        self.spec = spec

    def to_dict(self, *args, **kwargs) -> dict:
        return self.spec


def save_chart(
    chart: alt.TopLevelMixin,
    out_dir: Path,
    name: str,
    formats: Iterable[str] = ("html", "png", "svg"),
) -> list[Path]:
    """The chart as name.<format> for each format, each as chart.save(path) would write it.

    The spec is made (copied, checked against the Vega-Lite schema) once and rendered in every format: making
    it is most of a chart's cost, and chart.save made it again per format."""
    from altair.utils.save import save

    chart = (
        chart.configure_axis(labelFontSize=11, titleFontSize=12)
        .configure_title(fontSize=15, subtitleFontSize=11)
        .configure_legend(labelFontSize=11, titleFontSize=12)
    )
    # As chart.save makes it: every row inlined, none dropped.
    with alt.data_transformers.enable("default"), alt.data_transformers.disable_max_rows():
        spec = _Spec(chart.to_dict(context={"pre_transform": False}))
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
