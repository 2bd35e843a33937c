"""Compound charts made as Vega-Lite specs (vlspec) are the specs altair's own layer/hconcat/vconcat/concat make;
the chart modules give altair its channels as objects, not as strings it must look up."""

import ast
from pathlib import Path

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


# --- channels as altair's objects ---------------------------------------------------------------------------

CHART_MODULES = sorted(
    path
    for path in (Path(vlspec.__file__).parent).glob("*.py")
    if "import altair" in path.read_text(encoding="utf-8")
)


def shorthand_channels(source: str) -> list[tuple[int, str]]:
    """(line, channel) of every channel given as a string ("load:Q", f"{x}_hi:Q") or alt.value(...) in an
    .encode(...) call, and of every string in a list assigned to a name with "tooltip" in it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "encode":
            for keyword in node.keywords:
                values = keyword.value
                for value in values.elts if isinstance(values, (ast.List, ast.Tuple)) else [values]:
                    text = isinstance(value, ast.JoinedStr) or (
                        isinstance(value, ast.Constant) and isinstance(value.value, str)
                    )
                    if text or (
                        isinstance(value, ast.Call) and ast.unparse(value.func) == "alt.value"
                    ):
                        found.append((value.lineno, str(keyword.arg)))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            if any("tooltip" in getattr(target, "id", "") for target in node.targets):
                found += [
                    (item.lineno, "tooltip")
                    for item in node.value.elts
                    if isinstance(item, ast.Constant) and isinstance(item.value, str)
                ]
    return found


def test_shorthand_finder_finds_what_it_looks_for():
    source = (
        'c.encode(x="load:Q", y=alt.Y("rps:Q"), x2=f"{p}_hi:Q", color=alt.value("red"),\n'
        '         tooltip=["setup:N", alt.Tooltip("rps:Q")])\n'
        'tooltip = ["a:N", alt.Tooltip("b:Q")]\n'
        'other = ["a:N"]\n'
    )
    assert sorted(shorthand_channels(source)) == [
        (1, "color"),
        (1, "x"),
        (1, "x2"),
        (2, "tooltip"),
        (3, "tooltip"),
    ]


@pytest.mark.parametrize("path", CHART_MODULES, ids=lambda p: p.name)
def test_chart_modules_give_channels_as_altairs_objects(path):
    # altair looks a string channel up among its ~570 schema classes, hashing each (about 9 ms on the VMs here):
    # the article set's charts and model charts gave 158 of them, 1.4 s of the analysis.
    found = shorthand_channels(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name}: write alt.X(...), alt.Tooltip(...), ... at lines {found}"
