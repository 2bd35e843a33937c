"""Compound charts (layer, hconcat, vconcat, concat) made as Vega-Lite specs from altair's charts.

altair's own compound charts copy every subchart, deeply, at every level they are nested in, and again at every
.properties, .resolve_scale and .to_dict: for the article set's figure (4 rows of 3 panels of 5 layers) that was
most of the time the charts took. Here each altair chart is made into its spec once, when it joins a compound
chart (its data frame is read then, not when the chart is saved), and compound charts are plain dicts from then
on. The result has altair's interface as far as the chart modules and save_chart use it: properties,
resolve_scale and to_dict.

A part's data goes where altair puts it (the top level's "datasets", by the hash of its rows), so equal data drawn
in several panels is written once. Charts that need altair's own composition (facets over a layer, data given to a
layer for its parts) stay altair charts; they can be parts of a compound chart here.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import altair as alt
import pandas as pd
from altair.vegalite.v6.schema.core import Root

# Keys only the top level of a spec has, in the order altair writes them around the spec's own keys.
TOP_FIRST = ("config",)
TOP_LAST = ("$schema", "datasets")


@contextlib.contextmanager
def rows_inlined() -> Iterator[None]:
    """Data as chart.save writes it: every row inlined (altair's default transformer), none dropped."""
    with alt.data_transformers.enable("default"), alt.data_transformers.disable_max_rows():
        yield


def altair_spec(chart: Any) -> dict[str, Any]:
    """An altair chart's whole spec as chart.save makes it (rows inlined, no data pre-transformed), unchecked."""
    with rows_inlined():
        return chart.to_dict(validate=False, context={"pre_transform": False})


class Compound:
    """A compound chart as its Vega-Lite spec (without the top level's keys) and its top level's keys."""

    def __init__(self, spec: dict[str, Any], top: dict[str, Any]) -> None:
        self._spec = spec
        self._top = top

    def properties(self, **props: Any) -> "Compound":
        return Compound({**self._spec, **_plain(props)}, self._top)

    def resolve_scale(self, **channels: str) -> "Compound":
        resolve = copy.deepcopy(self._spec.get("resolve", {}))
        resolve.setdefault("scale", {}).update(channels)
        return Compound({**self._spec, "resolve": resolve}, self._top)

    def to_dict(self, validate: bool = True, **_: Any) -> dict[str, Any]:
        """The whole spec, as altair's to_dict gives it (validate: checked against the Vega-Lite schema)."""
        spec = {
            **{key: copy.deepcopy(self._top[key]) for key in TOP_FIRST if key in self._top},
            **self._spec,
            **{key: self._top[key] for key in TOP_LAST if key in self._top},
        }
        if validate:
            Root.validate(spec)
        return spec


def layer(*charts: Any, **props: Any) -> Compound:
    return _compose("layer", charts, props)


def hconcat(*charts: Any, **props: Any) -> Compound:
    return _compose("hconcat", charts, props)


def vconcat(*charts: Any, **props: Any) -> Compound:
    return _compose("vconcat", charts, props)


def concat(*charts: Any, columns: int, **props: Any) -> Compound:
    return _compose("concat", charts, {**props, "columns": columns})


def _compose(kind: str, charts: tuple[Any, ...], props: dict[str, Any]) -> Compound:
    made: dict[int, tuple[pd.DataFrame, Any]] = {}
    parts = [_part(chart, made) for chart in charts]
    top: dict[str, Any] = {}
    for _, part_top in parts:
        for key in TOP_FIRST + ("$schema",):
            if key in part_top:
                top.setdefault(key, part_top[key])
        if "datasets" in part_top:
            top.setdefault("datasets", {}).update(part_top["datasets"])
    specs = [spec for spec, _ in parts]
    # As altair does: data that every part draws is given once, to the compound chart.
    lifted = {}
    if specs and all("data" in spec and spec["data"] == specs[0]["data"] for spec in specs):
        lifted = {"data": specs[0]["data"]}
        specs = [{key: value for key, value in spec.items() if key != "data"} for spec in specs]
    return Compound({**lifted, kind: specs, **_plain(props)}, top)


def _rows(frame: pd.DataFrame, made: dict[int, tuple[pd.DataFrame, Any]]) -> Any:
    """The frame as altair's default data transformer makes it ({"values": [...]}), once per frame of a compound
    chart's parts (the layers of a panel draw one frame; making its rows is most of a part's cost). Only within
    one compound chart: a frame changed after one chart was made must not reach the next as it was."""
    if id(frame) not in made:
        # The frame is held beside its rows: its id cannot pass to another frame meanwhile.
        made[id(frame)] = (frame, alt.data_transformers.get()(frame))
    return made[id(frame)][1]


def _part(
    chart: Any, made: dict[int, tuple[pd.DataFrame, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A part's spec and its top level's keys (config, $schema, datasets)."""
    if isinstance(chart, Compound):
        return chart._spec, chart._top
    if isinstance(getattr(chart, "data", None), pd.DataFrame):
        chart = chart.copy(deep=False)
        with rows_inlined():
            chart.data = _rows(chart.data, made)
    spec = altair_spec(chart)
    top = {key: spec.pop(key) for key in TOP_FIRST + TOP_LAST if key in spec}
    return spec, top


def _plain(props: dict[str, Any]) -> dict[str, Any]:
    """Properties as JSON: altair's objects (alt.Title, ...) made into their dicts."""

    def plain(value: Any) -> Any:
        if isinstance(value, alt.SchemaBase):
            return value.to_dict(validate=False)
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        return value

    return {key: plain(value) for key, value in props.items() if value is not alt.Undefined}


# What a chart function returns: an altair chart or a compound chart made here (save_chart takes either).
ChartLike = alt.TopLevelMixin | Compound
