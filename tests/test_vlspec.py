"""Compound charts made as Vega-Lite specs (vlspec) are the specs altair's own layer/hconcat/vconcat/concat make."""

import altair as alt
import pandas as pd
import pytest

from sidecar_bench import vlspec


def frames():
    a = pd.DataFrame({"load": [0, 15, 30], "rps": [100.0, 80.0, 55.5], "setup": ["x", "x", "x"]})
    b = pd.DataFrame({"load": [0, 15, 30], "rps": [90.0, 70.0, 40.0], "setup": ["y", "y", "y"]})
    return a, b


def panels(compose, a, b):
    """Panels with shared data (lifted to the layer), with different data, a leaf, properties and resolutions."""
    base_a = alt.Chart(a).encode(x="load:Q", y="rps:Q", color="setup:N")
    base_b = alt.Chart(b).encode(x="load:Q", y="rps:Q", color="setup:N")
    shared = compose.layer(
        base_a.mark_line(), base_a.mark_point(filled=True).transform_filter(alt.datum.load > 0)
    ).properties(title="shared data", width=200, height=120)
    mixed = compose.layer(base_a.mark_line(), base_b.mark_line(strokeDash=[4, 3])).properties(
        title="two frames"
    )
    leaf = base_b.mark_bar().properties(title="a leaf", width=100)
    row = compose.hconcat(shared, mixed, leaf, spacing=12).resolve_scale(y="independent")
    return (
        compose.vconcat(row, compose.hconcat(leaf, shared))
        .resolve_scale(color="shared")
        .properties(title=alt.Title("Title", subtitle=["one", "two"]))
    )


def test_a_compound_chart_is_the_spec_altair_makes():
    a, b = frames()
    ours = panels(vlspec, a, b).to_dict()
    theirs = panels(alt, a, b).to_dict()
    assert ours == theirs
    # Each frame's rows once, whatever the number of panels that draw it.
    assert len(ours["datasets"]) == 2


def test_concat_with_columns_is_altairs():
    a, b = frames()
    charts = [alt.Chart(frame).mark_point().encode(x="load:Q", y="rps:Q") for frame in (a, b, a)]
    ours = vlspec.concat(*charts, columns=2).resolve_scale(color="shared").to_dict()
    assert ours == alt.concat(*charts, columns=2).resolve_scale(color="shared").to_dict()


def test_a_frame_is_read_when_its_chart_joins_a_compound_chart():
    """Not when the compound chart is saved: what was drawn is what the frame held then."""
    a, b = frames()
    chart = vlspec.layer(alt.Chart(a).mark_line().encode(x="load:Q", y="rps:Q"))
    a.loc[0, "rps"] = -1.0
    later = vlspec.layer(alt.Chart(a).mark_line().encode(x="load:Q", y="rps:Q"))
    (before,) = chart.to_dict()["datasets"].values()
    (after,) = later.to_dict()["datasets"].values()
    assert before[0]["rps"] == 100.0 and after[0]["rps"] == -1.0


def test_to_dict_checks_the_spec_and_gives_a_copy_of_its_config():
    a, _ = frames()
    chart = vlspec.hconcat(alt.Chart(a).mark_point().encode(x="load:Q", y="rps:Q"))
    spec = chart.to_dict()
    spec["config"]["axis"] = {"labelFontSize": 30}
    assert "axis" not in chart.to_dict()["config"]
    bad = chart.properties(spacing="wide")  # not a number
    with pytest.raises(Exception, match="wide"):
        bad.to_dict()
    assert bad.to_dict(validate=False)["spacing"] == "wide"
