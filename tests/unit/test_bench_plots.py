"""The bench's pictures say what they draw (issue 32, point 3): ksweep.png's legend hides no point (it
hid the k=1 point in the upper left) and its title names the accept length only when it is drawn;
ttft.png's log axis labels more than 0.1 and 1."""

from __future__ import annotations

import pytest

from servebuild.check import plots

pytest.importorskip("matplotlib")


@pytest.fixture
def figures(monkeypatch):
    made = []

    def keep(fig, path):
        made.append(fig)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    yield made
    for fig in made:
        plots._pyplot().close(fig)


def points_in(ax, xs, ys):
    return [ax.transData.transform((x, y)) for x, y in zip(xs, ys)]


@pytest.mark.parametrize("accept", [False, True])
def test_the_ksweep_legend_hides_no_point_and_the_title_says_what_is_drawn(figures, tmp_path, accept):
    summary = {"suite": "ksweep", "ksweep_k1_tg_tps": 120.0, "ksweep_k2_tg_tps": 100.0, "ksweep_k3_tg_tps": 90.0}
    if accept:
        summary.update(ksweep_k1_accept_length=3.9, ksweep_k2_accept_length=3.0, ksweep_k3_accept_length=2.0)
    plots.ksweep_plot(summary, tmp_path / "ksweep.png")
    fig = figures[0]
    fig.canvas.draw()
    ax = fig.axes[0]
    box = ax.get_legend().get_window_extent()
    pts = points_in(ax, [1, 2, 3], [120.0, 100.0, 90.0])
    if accept:
        pts += points_in(fig.axes[1], [1, 2, 3], [3.9, 3.0, 2.0])
    assert not [p for p in pts if box.contains(*p)], "the legend covers a point"
    title = ax.get_title()
    assert ("accept length" in title) is accept, title
    assert "1/TPOT" in ax.get_ylabel()


def test_a_log_ttft_axis_labels_more_than_two_ticks(figures, tmp_path):
    plots.ttft_plot({"a": [0.05, 0.08, 0.3], "b": [0.4, 1.5, 3.0]}, tmp_path / "ttft.png", "t")
    fig = figures[0]
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    low, high = ax.get_xlim()
    labelled = [t for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]
    assert len(labelled) >= 4, [t.get_text() for t in labelled]
