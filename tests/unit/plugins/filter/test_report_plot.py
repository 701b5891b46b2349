"""Unit tests for plugins/filter/report_plot.py (the reports' plots, SVG drawn with matplotlib)."""
from __future__ import annotations

import random
import re
import sys
import xml.etree.ElementTree as ET

import pytest
from ansible.errors import AnsibleFilterError

from filter_cases import load_filter

report_plot = load_filter("report_plot")
FILTERS = report_plot.FilterModule().filters()
needs_matplotlib = pytest.mark.skipif(not report_plot.report_plot_available(),
                                      reason="matplotlib is not installed (requirements/toolchain.txt installs it)")
SVG = "{http://www.w3.org/2000/svg}"

LINE = {"kind": "line", "title": "Output tokens/s per concurrency", "xlabel": "concurrency", "ylabel": "tokens/s",
        "series": [{"label": "baseline", "x": [1, 4, 16], "y": [41.2, 150.3, 402.9]},
                   {"label": "ngram k=4", "x": [1, 4, None, 16], "y": [63.0, 201.7, 300, None]}]}
BAR = {"kind": "bar", "title": "TTFT p50 r1 vs r2", "ylabel": "seconds", "categories": ["c=1", "c=8", "c=32"],
       "series": [{"label": "replica-1", "values": [0.08, 0.31, 1.2]}, {"label": "replica-2", "values": [0.09, 0.27, 0]}]}
HIST = {"kind": "hist", "title": "Request latency", "xlabel": "seconds", "logy": True,
        "series": [{"label": "before", "samples": [0.1, 0.2, 0.2, 0.25, 3.5, None]},
                   {"label": "after", "samples": [0.1, 0.15, 0.4]}]}


def texts(svg):
    """The SVG parsed (it must be well-formed), and the strings of all its <text> elements."""
    root = ET.fromstring(svg.encode("utf-8"))
    assert root.tag == SVG + "svg", root.tag
    return root, ["".join(t.itertext()) for t in root.iter(SVG + "text")]


def test_filters_exported():
    assert set(FILTERS) == {"report_plot", "report_plot_available", "report_plot_inline"}


@needs_matplotlib
@pytest.mark.parametrize("spec", [LINE, BAR, HIST], ids=["line", "bar", "hist"])
def test_each_kind_is_an_svg_with_title_and_labels(spec):
    svg = report_plot.report_plot(spec)
    root, strings = texts(svg)
    assert root.get("width") == "504pt" and root.get("height") == "288pt"  # 7 x 4 inches at 72 pt
    assert spec["title"] in strings
    for series in spec["series"]:
        assert series["label"] in strings
    for field in ("xlabel", "ylabel"):
        if field in spec:
            assert spec[field] in strings
    for category in spec.get("categories", []):
        assert category in strings


@needs_matplotlib
@pytest.mark.parametrize("spec", [LINE, BAR, HIST], ids=["line", "bar", "hist"])
def test_same_spec_same_bytes(spec):
    assert report_plot.report_plot(spec) == report_plot.report_plot(spec)


@needs_matplotlib
def test_no_date_and_text_kept_as_text():
    svg = report_plot.report_plot(LINE)
    assert "<dc:date>" not in svg
    assert "<text" in svg and "glyph" not in svg  # svg.fonttype none: no paths drawn for the letters


@needs_matplotlib
def test_size_and_literal_text():
    spec = {"kind": "line", "title": "cost $ per 1M tokens, $5 < $9 & co", "width": 5, "height": 3.5,
            "series": [{"label": "_hidden? no", "x": [1], "y": [2]}]}
    root, strings = texts(report_plot.report_plot(spec))
    assert root.get("width") == "360pt" and root.get("height") == "252pt"
    assert spec["title"] in strings  # '$' is no math mode, '<' and '&' are escaped
    assert "_hidden? no" in strings  # a label starting with '_' is still in the legend


@needs_matplotlib
def test_line_none_points_skipped_and_log_with_zeros():
    spec = {"kind": "line", "title": "t", "logy": True,
            "series": [{"label": "a", "x": [None, 1, 2, 3], "y": [5, 0, None, 10]}]}
    texts(report_plot.report_plot(spec))
    assert report_plot._validate(spec)["series"][0] == {"label": "a", "x": [1.0, 3.0], "y": [0.0, 10.0]}


@needs_matplotlib
def test_hist_single_sample_and_empty_series():
    texts(report_plot.report_plot({"kind": "hist", "series": [{"label": "one", "samples": [3]},
                                                              {"label": "none", "samples": []}]}))


@pytest.mark.parametrize("spec, field, words", [
    ("not a dict", "spec must be a dict", ["kind", "series"]),
    ({"kind": "pie", "series": []}, "kind", ["line, bar, hist", "'pie'"]),
    ({"series": [{"label": "a", "x": [1], "y": [1]}]}, "kind", ["line, bar, hist", "None"]),
    ({"kind": "line", "ylog": True, "series": []}, "ylog", ["unknown key", "logy"]),
    ({"kind": "line"}, "series", ["non-empty list", "label, x, y"]),
    ({"kind": "line", "series": []}, "series", ["non-empty list"]),
    ({"kind": "line", "series": ["a"]}, "series[0]", ["must be a dict"]),
    ({"kind": "line", "series": [{"x": [1], "y": [1]}]}, "series[0].label", ["non-empty string"]),
    ({"kind": "line", "series": [{"label": "a", "y": [1]}]}, "series[0].x", ["missing"]),
    ({"kind": "line", "series": [{"label": "a", "x": [1, 2], "y": [1]}]}, "series[0]",
     ["same length", "2 x and 1 y"]),
    ({"kind": "line", "series": [{"label": "a", "x": [1, "2"], "y": [1, 2]}]}, "series[0].x[1]", ["number", "'2'"]),
    ({"kind": "line", "series": [{"label": "a", "x": [1], "y": [True]}]}, "series[0].y[0]", ["number"]),
    ({"kind": "line", "series": [{"label": "a", "x": [1], "y": [float("nan")]}]}, "series[0].y[0]", ["finite"]),
    ({"kind": "line", "series": [{"label": "a", "x": [1], "y": [float("inf")]}]}, "series[0].y[0]", ["finite"]),
    ({"kind": "line", "series": [{"label": "a", "x": "1,2", "y": [1]}]}, "series[0].x", ["list of numbers"]),
    ({"kind": "line", "series": [{"label": "a", "values": [1]}]}, "series[0]", ["unknown key", "values", "label, x, y"]),
    ({"kind": "line", "logy": True, "series": [{"label": "a", "x": [1], "y": [0]}]}, "logy", ["value > 0"]),
    ({"kind": "line", "logy": "yes", "series": [{"label": "a", "x": [1], "y": [1]}]}, "logy", ["true or false"]),
    ({"kind": "line", "title": 5, "series": [{"label": "a", "x": [1], "y": [1]}]}, "title", ["string"]),
    ({"kind": "line", "width": 0, "series": [{"label": "a", "x": [1], "y": [1]}]}, "width", ["inches"]),
    ({"kind": "line", "height": 500, "series": [{"label": "a", "x": [1], "y": [1]}]}, "height", ["<= 50"]),
    ({"kind": "line", "categories": ["a"], "series": [{"label": "a", "x": [1], "y": [1]}]}, "categories",
     ["only for kind bar"]),
    ({"kind": "bar", "series": [{"label": "a", "values": [1]}]}, "categories", ["non-empty list"]),
    ({"kind": "bar", "categories": ["a", None], "series": [{"label": "a", "values": [1, 2]}]}, "categories[1]",
     ["string or a number"]),
    ({"kind": "bar", "categories": ["a", "b"], "series": [{"label": "a", "values": [1]}]}, "series[0].values",
     ["one value per category", "2 categories, got 1"]),
    ({"kind": "bar", "categories": ["a"], "series": [{"label": "a", "values": [None]}]}, "series[0].values[0]",
     ["must be a number, got None"]),
    ({"kind": "hist", "bins": 0, "series": [{"label": "a", "samples": [1]}]}, "bins", ["1 to 500"]),
    ({"kind": "hist", "logy": True, "series": [{"label": "a", "samples": [None]}]}, "logy", ["at least one sample"]),
    ({"kind": "hist", "series": [{"label": "a", "samples": [1, "x"]}]}, "series[0].samples[1]", ["number or None"]),
    ({"kind": "hist", "series": [{"label": "s%d" % i, "samples": [1]} for i in range(21)]}, "series", ["at most 20"]),
    ({"kind": "hist", "lines": {"label": "a", "x": 1}, "series": [{"label": "a", "samples": [1]}]}, "lines",
     ["list of {label, x} or {label, y}"]),
    ({"kind": "hist", "lines": ["a"], "series": [{"label": "a", "samples": [1]}]}, "lines[0]", ["must be a dict"]),
    ({"kind": "hist", "lines": [{"x": 1}], "series": [{"label": "a", "samples": [1]}]}, "lines[0].label", ["non-empty"]),
    ({"kind": "hist", "lines": [{"label": "a", "x": 1, "y": 2}], "series": [{"label": "a", "samples": [1]}]}, "lines[0]",
     ["exactly one of x", "got x, y"]),
    ({"kind": "hist", "lines": [{"label": "a"}], "series": [{"label": "a", "samples": [1]}]}, "lines[0]", ["got neither"]),
    ({"kind": "hist", "lines": [{"label": "a", "x": "70"}], "series": [{"label": "a", "samples": [1]}]}, "lines[0].x",
     ["must be a number", "'70'"]),
    ({"kind": "hist", "lines": [{"label": "a", "x": 1, "colour": "red"}], "series": [{"label": "a", "samples": [1]}]},
     "lines[0]", ["unknown key", "colour"]),
    ({"kind": "bar", "categories": ["a"], "lines": [{"label": "even", "x": 1}], "series": [{"label": "a", "values": [1]}]},
     "lines[0].x", ["categories", "use y"]),
    ({"kind": "line", "lines": [{"label": "l%d" % i, "y": i} for i in range(21)], "series": [{"label": "a", "x": [1], "y": [1]}]},
     "lines", ["at most 20"]),
])
def test_bad_spec_names_the_field(spec, field, words):
    """Validation comes before matplotlib: these run without it too."""
    with pytest.raises(AnsibleFilterError) as err:
        report_plot.report_plot(spec)
    message = str(err.value)
    assert message.startswith("report_plot: "), message
    assert field in message, message
    for word in words:
        assert word in message, message


def _unimportable(monkeypatch, *names):
    """The filter file loaded afresh while NAMES cannot be imported (None in sys.modules fails an import)."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)
    return load_filter("report_plot")


def test_not_installed_message(monkeypatch):
    module = _unimportable(monkeypatch, "matplotlib")
    assert module.HAS_MATPLOTLIB is False
    assert module.report_plot_available() is False
    assert module.report_plot_available("anything") is False
    with pytest.raises(AnsibleFilterError, match=r"matplotlib is not installed on the controller \(pip install matplotlib\)"):
        module.report_plot(LINE)
    with pytest.raises(AnsibleFilterError, match="kind"):  # a bad spec is still named first
        module.report_plot({"kind": "pie"})


@needs_matplotlib
def test_broken_install_message(monkeypatch):
    """matplotlib found but one of its parts failing to import reads as not installed, with the cause."""
    module = _unimportable(monkeypatch, "matplotlib.backends.backend_svg")
    assert module.HAS_MATPLOTLIB is True
    assert module.report_plot_available() is False
    with pytest.raises(AnsibleFilterError, match=r"not installed on the controller \(pip install matplotlib\): "):
        module.report_plot(LINE)


def _value(rng):
    """A float of the kind a report holds: zeros, small, ordinary, large, some negative."""
    pick = rng.random()
    if pick < 0.15:
        return 0 if rng.random() < 0.5 else 0.0
    if pick < 0.3:
        return rng.uniform(0, 1e-6)
    if pick < 0.45:
        return rng.uniform(1e6, 1e12)
    if pick < 0.55:
        return rng.randint(-1000, 1000)
    return rng.uniform(-5, 500)


def random_spec(rng):
    kind = rng.choice(("line", "bar", "hist"))
    count = rng.randint(1, 4)
    length = rng.randint(1, 30)
    spec = {"kind": kind, "title": "plot %d" % rng.randint(0, 10 ** 6), "xlabel": "x", "ylabel": "y"}
    if kind == "line":
        spec["series"] = [{"label": "line %d" % i,
                           "x": [_value(rng) for dummy in range(length)],
                           "y": [None if rng.random() < 0.05 else _value(rng) for dummy in range(length)]}
                          for i in range(count)]
    elif kind == "bar":
        spec["categories"] = ["cat %d" % i for i in range(length)]
        spec["series"] = [{"label": "bar %d" % i, "values": [_value(rng) for dummy in range(length)]} for i in range(count)]
    else:
        spec["series"] = [{"label": "hist %d" % i, "samples": [_value(rng) for dummy in range(rng.randint(1, 30))]}
                          for i in range(count)]
        if rng.random() < 0.3:
            spec["bins"] = rng.randint(1, 60)
    if rng.random() < 0.25:
        key = {"line": "y", "bar": "values", "hist": "samples"}[kind]
        spec["logy"] = any(v is not None and (kind == "hist" or v > 0) for s in spec["series"] for v in s[key])
    if rng.random() < 0.2:
        spec["width"], spec["height"] = rng.uniform(3, 12), rng.uniform(2, 8)
    if rng.random() < 0.3:
        spec["lines"] = [{"label": "ref %d" % i, ("y" if kind == "bar" or rng.random() < 0.5 else "x"): _value(rng)}
                         for i in range(rng.randint(1, 3))]
    return spec


@needs_matplotlib
@pytest.mark.parametrize("seed", range(100))
def test_random_specs_give_svg(seed):
    spec = random_spec(random.Random(seed))
    _root, strings = texts(report_plot.report_plot(spec))
    assert spec["title"] in strings, spec
    assert {s["label"] for s in spec["series"] + spec.get("lines", [])} <= set(strings), spec


@needs_matplotlib
@pytest.mark.parametrize("spec", [
    dict(HIST, lines=[{"label": "limit 1.5 s", "x": 1.5}, {"label": "mean $0.4 s", "x": 0.4}]),
    dict(BAR, lines=[{"label": "even share 0.5", "y": 0.5}]),
    dict(LINE, lines=[{"label": "target", "y": 300}, {"label": "c=8", "x": 8}]),
], ids=["hist", "bar", "line"])
def test_reference_lines_are_drawn_and_named(spec):
    """Each line is in the legend (its label literal: '$' is no math mode) and drawn dashed over the data."""
    root, strings = texts(report_plot.report_plot(spec))
    for line in spec["lines"]:
        assert line["label"] in strings, strings
    dashed = [p for p in root.iter(SVG + "path") if "stroke-dasharray" in (p.get("style") or "")]
    assert len(dashed) >= 2 * len(spec["lines"]), "a line and its legend sample each"  # plot + legend
    assert report_plot.report_plot(spec) == report_plot.report_plot(spec)


@needs_matplotlib
def test_a_line_far_from_the_data_stretches_the_axis():
    """A threshold at 70 tok/s beside streams at 5-8 tok/s is still shown (the axis reaches it)."""
    spec = {"kind": "hist", "series": [{"label": "streams", "samples": [5, 6, 7, 8]}],
            "lines": [{"label": "at least 70", "x": 70}]}
    _root, strings = texts(report_plot.report_plot(spec))
    ticks = [float(t.replace("\u2212", "-")) for t in strings if t.replace(".", "", 1).replace("\u2212", "").isdigit()]
    assert max(ticks) >= 70, strings


def test_lines_validated_without_matplotlib():
    plot = report_plot._validate(dict(HIST, lines=[{"label": "limit", "x": 2}, {"label": "n", "y": 3.5}]))
    assert plot["lines"] == [{"label": "limit", "axis": "x", "value": 2.0}, {"label": "n", "axis": "y", "value": 3.5}]
    assert report_plot._validate(HIST)["lines"] == []


@needs_matplotlib
def test_inline_element_for_html():
    svg = report_plot.report_plot(dict(HIST, lines=[{"label": "limit", "x": 1.5}]))
    element = report_plot.report_plot_inline(svg)
    assert element.startswith("<svg ") and element.endswith("</svg>\n")
    assert "<?xml" not in element and "<!DOCTYPE" not in element and "<metadata>" not in element
    ET.fromstring(element.encode("utf-8"))
    ids = re.findall(r'\bid="([^"]+)"', element)
    prefixed = report_plot.report_plot_inline(svg, "plot-latency")
    assert re.findall(r'\bid="([^"]+)"', prefixed) == ["plot-latency-" + i for i in ids]
    refs = re.findall(r"url\(#([^)]+)\)", prefixed)
    assert refs and all(r.startswith("plot-latency-") for r in refs)
    assert set(refs) <= set(re.findall(r'\bid="([^"]+)"', prefixed)), "every reference points at an element of the plot"
    # Two plots of the same size share matplotlib's clip-path ids; prefixed, one page holds both.
    other = report_plot.report_plot_inline(report_plot.report_plot(BAR), "plot-replicas")
    assert not set(re.findall(r'\bid="([^"]+)"', prefixed)) & set(re.findall(r'\bid="([^"]+)"', other))
    assert report_plot.report_plot_inline(svg, None) == element


@pytest.mark.parametrize("svg, prefix, words", [
    (None, "", ["must be an SVG document"]),
    ("<html></html>", "", ["must be an SVG document", "<html>"]),
    ("<svg></svg>", "1plot", ["prefix must be a letter", "'1plot'"]),
    ("<svg></svg>", "a b", ["prefix must be a letter"]),
    ("<svg></svg>", 5, ["prefix must be a letter"]),
])
def test_inline_refuses_what_it_cannot_place(svg, prefix, words):
    with pytest.raises(AnsibleFilterError) as err:
        report_plot.report_plot_inline(svg, prefix)
    message = str(err.value)
    assert message.startswith("report_plot_inline: "), message
    for word in words:
        assert word in message, message


def test_inline_of_a_small_document():
    doc = ('<?xml version="1.0"?>\n<!DOCTYPE svg>\n<svg xmlns="http://www.w3.org/2000/svg"><metadata>x</metadata>'
           '<defs><clipPath id="c1"/></defs><g id="g" clip-path="url(#c1)"><use xlink:href="#g"/></g></svg>')
    assert report_plot.report_plot_inline(doc, "p") == (
        '<svg xmlns="http://www.w3.org/2000/svg"><defs><clipPath id="p-c1"/></defs>'
        '<g id="p-g" clip-path="url(#p-c1)"><use xlink:href="#p-g"/></g></svg>\n')
