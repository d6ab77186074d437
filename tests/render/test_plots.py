"""The PNGs of ``rollaudit compare --plot``: they open, have the expected size, and say what they show."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image
from typer.testing import CliRunner

import rollaudit
from rollaudit._cli import app
from rollaudit._render import plots as _plots

ROOT = Path(__file__).resolve().parents[2]
FANOUT = ROOT / "sample_dumps" / "fanout"
UNIFORM = ROOT / "sample_dumps" / "uniform.pt"
DUMP_DETAILS = ROOT / "sample_dumps" / "dump_details"


@pytest.fixture(scope="module")
def audited():
    table = rollaudit.load([FANOUT, UNIFORM, DUMP_DETAILS])
    report = rollaudit.audit(table, device="cpu", keep_advantages=True)
    # The recomputed schemes; the recorded advantages are drawn where a test reads the report's own figures.
    return report, {name: values for name, values in report.advantages_by_scheme().items() if name != "recorded"}


def _axes_with_content(figure):
    return [axis for axis in figure.axes if axis.get_visible()]


def _assert_labelled(figure):
    assert figure.get_suptitle()
    for axis in _axes_with_content(figure):
        assert axis.get_title(), axis
        assert axis.get_xlabel() and axis.get_ylabel(), axis


def test_group_sizes_figure(audited):
    report, _ = audited
    figure = _plots.group_sizes_figure(report)
    _assert_labelled(figure)
    assert figure.get_suptitle() == "Group sizes (178 samples)"
    titles = [axis.get_title() for axis in figure.axes]
    assert titles == ["samples per prompt", "trajectories per prompt", "samples per trajectory"]
    # bar heights are the histogram's counts
    samples_axis = figure.axes[0]
    heights = {round(patch.get_x() + patch.get_width() / 2): patch.get_height() for patch in samples_axis.patches}
    assert heights == {size: count for size, count in report.histograms["samples_per_prompt"].items()}


def _points(axis) -> np.ndarray:
    """The samples drawn, without the rings over those a finding names."""
    return np.concatenate([collection.get_offsets() for collection in _kinds(axis)])


def _kinds(axis) -> list:
    return [collection for collection in axis.collections if not collection.get_label().startswith("named by ")]


def test_advantage_scatter_figure(audited):
    report, advantages = audited
    figure = _plots.advantage_scatter_figure(report, advantages)
    _assert_labelled(figure)
    assert figure.get_suptitle() == "Advantage under each scheme against the reference prompt; 178 samples"
    axes = _axes_with_content(figure)
    assert [axis.get_ylabel() for axis in axes] == ["advantage under batch", "advantage under trajectory"]
    assert all(axis.get_xlabel() == "advantage under prompt (reference)" for axis in axes)
    batch_axis = axes[0]
    assert batch_axis.get_title().startswith(f"batch: {report.summary.loc['batch', 'sign_flip_rate'] * 100:.1f}%")
    points = _points(batch_axis)
    order = np.lexsort((points[:, 1], points[:, 0]))
    expected = np.column_stack([advantages["prompt"], advantages["batch"]])
    np.testing.assert_allclose(points[order], expected[np.lexsort((expected[:, 1], expected[:, 0]))])
    # One colour per kind of point, counted in the legend as the metrics count them.
    kinds = {collection.get_label().split(":")[0]: collection for collection in _kinds(batch_axis)}
    assert list(kinds) == [label for _, label, _, _ in _plots.POINT_KINDS]
    colours = {tuple(np.round(collection.get_facecolor()[0][:3], 3)) for collection in _kinds(batch_axis)}
    assert len(colours) == 4
    summary = report.summary.loc["batch"]
    invented = kinds["invented (reference 0, scheme ≠ 0)"]
    assert len(invented.get_offsets()) == summary["spurious_nonzero"] == 35
    assert invented.get_label().endswith(": 35")
    assert len(kinds["reversed (+ became − or back)"].get_offsets()) == round(summary["strict_flip_rate"] * 178) == 0
    assert [text.get_text() for text in batch_axis.get_legend().get_texts()][2].endswith(": 35")


def test_the_scatter_plots_the_recorded_advantages_when_the_dump_has_them():
    report = rollaudit.audit(rollaudit.load(DUMP_DETAILS), device="cpu", keep_advantages=True)
    figure = _plots.figures(report)["advantage_scatter"]
    labels = [axis.get_ylabel() for axis in _axes_with_content(figure)]
    assert labels == ["advantage under batch", "advantage under trajectory", "advantage under recorded"]
    recorded = _axes_with_content(figure)[2]
    assert len(_points(recorded)) == 24  # the 24 trained samples; the 2 the schedule dropped have none


def test_scatter_thins_out_huge_batches(audited, monkeypatch):
    report, advantages = audited
    monkeypatch.setattr(_plots, "MAX_SCATTER_POINTS", 50)
    figure = _plots.advantage_scatter_figure(report, advantages)
    assert "every 4th of 178 samples" in figure.get_suptitle()
    assert len(_points(figure.axes[0])) == 45


def test_per_step_figure(audited):
    report, _ = audited
    figure = _plots.per_step_figure(report)
    _assert_labelled(figure)
    flip_axis, inflation_axis, size_axis = figure.axes
    assert flip_axis.get_title() == "Share of signs changed against prompt"
    assert inflation_axis.get_title() == "Non-zero inflation against prompt"
    assert size_axis.get_title() == "Prompt-group sizes"
    median_line = next(line for line in size_axis.get_lines() if line.get_label() == "median")
    np.testing.assert_allclose(median_line.get_ydata(), report.step_groups.sort_index()["median_group"].to_numpy())
    batch_line = next(line for line in flip_axis.get_lines() if line.get_label() == "batch")
    assert list(batch_line.get_xdata()) == [0, 3, 5]
    per_step = report.per_step.xs("batch", level="scheme")
    np.testing.assert_allclose(batch_line.get_ydata(), per_step["sign_flip_rate"].to_numpy() * 100)
    inflation_line = next(line for line in inflation_axis.get_lines() if line.get_label() == "batch")
    np.testing.assert_allclose(inflation_line.get_ydata(), per_step["nonzero_inflation"].to_numpy())


def test_write_plots_png_files(audited, tmp_path):
    report, _ = audited
    paths = _plots.write_plots(report, tmp_path / "plots")  # the scatter: batch, trajectory and recorded
    assert [path.name for path in paths] == [
        "group_sizes.png",
        "advantage_scatter.png",
        "advantage_distribution.png",
        "per_step.png",
    ]
    expected = {
        "advantage_distribution.png": (
            (1980, 540),
            "Advantage distributions against the reference prompt (178 samples)",
        ),
        "group_sizes.png": ((1800, 540), "Group sizes (178 samples)"),
        "advantage_scatter.png": ((1980, 660), "Advantage under each scheme against the reference prompt; 178 samples"),
        "per_step.png": ((2250, 600), "Per step (3 steps)"),
    }
    for path in paths:
        with Image.open(path) as image:
            assert image.format == "PNG"
            size, title = expected[path.name]
            assert image.size == size
            assert image.info["Title"] == title
            pixels = np.asarray(image.convert("L"))
            assert pixels.std() > 5  # not blank
    assert not list((tmp_path / "plots").glob("*.tmp"))


def test_compare_plot_option(tmp_path):
    target = tmp_path / "figures"
    result = CliRunner().invoke(app, ["compare", str(FANOUT), "--plot", str(target), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert sorted(path.name for path in target.iterdir()) == [
        "advantage_distribution.png",
        "advantage_scatter.png",
        "group_sizes.png",
        "per_step.png",
    ]
    assert result.stderr.count("wrote ") == 4
    with Image.open(target / "per_step.png") as image:
        assert image.info["Title"] == "Per step (1 step)"


def test_plot_directory_checked_before_loading(tmp_path, monkeypatch):
    monkeypatch.setattr(rollaudit, "load", lambda *a, **k: pytest.fail("loaded"))
    a_file = tmp_path / "file"
    a_file.write_text("")
    for bad in (a_file, a_file / "figures"):
        result = CliRunner().invoke(app, ["compare", str(FANOUT), "--plot", str(bad)], catch_exceptions=False)
        assert result.exit_code == 2
        assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


def test_plot_makes_every_missing_directory(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    result = CliRunner().invoke(app, ["compare", str(FANOUT), "--plot", str(target), "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert sorted(path.name for path in target.iterdir()) == sorted(_plots.FILES.values())


def test_per_step_ticks_are_whole_steps(audited):
    report, _ = audited
    figure = _plots.per_step_figure(report)
    figure.canvas.draw()
    for axis in figure.axes:
        ticks = axis.get_xticks()
        assert np.all(ticks == np.round(ticks)), ticks


def _drawn(figure):
    """The figure drawn by Agg, so that its ticks and labels are where a PNG shows them."""
    FigureCanvasAgg(figure).draw()
    return figure


def _shown_ticks(axis) -> list[tuple[float, str]]:
    """The x ticks inside the view, each with its label's text."""
    low, high = axis.get_xlim()
    labels = [label.get_text() for label in axis.get_xticklabels()]
    return [
        (float(where), label) for where, label in zip(axis.get_xticks(), labels, strict=True) if low <= where <= high
    ]


def test_group_size_ticks_are_whole_numbers_when_every_group_has_the_same_size():
    # Every prompt holds 4 trajectories of one sample: one bar a panel, at 4.
    report = rollaudit.audit(
        rollaudit.make_table(reward=[0, 1, 0, 1] * 3, prompt=[0] * 4 + [1] * 4 + [2] * 4, trajectory=list(range(12))),
        device="cpu",
    )
    figure = _drawn(_plots.group_sizes_figure(report))
    for axis in _axes_with_content(figure):
        ticks = _shown_ticks(axis)
        assert ticks, axis.get_title()
        for where, label in ticks:
            assert where == round(where), (axis.get_title(), ticks)
            assert label == "" or label == str(round(where)), (axis.get_title(), ticks)
        # The ticks stand under the bars.
        centres = {round(patch.get_x() + patch.get_width() / 2, 6) for patch in axis.patches}
        assert {round(where, 6) for where, _ in ticks} <= centres, (axis.get_title(), ticks, centres)


def test_group_size_ticks_stand_under_the_bars(audited):
    report, _ = audited
    figure = _drawn(_plots.group_sizes_figure(report))
    renderer = figure.canvas.get_renderer()
    for axis in _axes_with_content(figure):
        centres = {round(patch.get_x() + patch.get_width() / 2, 6) for patch in axis.patches}
        ticks = _shown_ticks(axis)
        assert {round(where, 6) for where, _ in ticks} <= centres, (axis.get_title(), ticks, centres)
        labelled = [int(label) for _, label in ticks if label]
        assert len(labelled) >= min(3, len(centres)), (axis.get_title(), ticks)
        # Labels never overlap: each one's box clear of the next.
        boxes = sorted(
            (label.get_window_extent(renderer) for label in axis.get_xticklabels() if label.get_text()),
            key=lambda box: box.x0,
        )
        assert all(left.x1 <= right.x0 for left, right in itertools.pairwise(boxes)), axis.get_title()


def test_advantage_distribution_figure(audited):
    report, advantages = audited
    figure = _plots.advantage_distribution_figure(report, advantages)
    _assert_labelled(figure)
    assert figure.get_suptitle() == "Advantage distributions against the reference prompt (178 samples)"
    axes = _axes_with_content(figure)
    assert [axis.get_title() for axis in axes] == ["batch against prompt", "trajectory against prompt"]
    batch_axis = axes[0]
    bars = [patch for patch in batch_axis.patches if patch.get_fill()]
    edges = np.array([bar.get_x() for bar in bars] + [bars[-1].get_x() + bars[-1].get_width()])
    heights = np.array([bar.get_height() for bar in bars])
    np.testing.assert_array_equal(heights, np.histogram(advantages["batch"], bins=edges)[0])
    assert heights.sum() == 178
    # The reference as an outline over the same bins: one unfilled step patch.
    outlines = [patch for patch in batch_axis.patches if not patch.get_fill()]
    assert len(outlines) == 1
    labels = [text.get_text() for text in batch_axis.get_legend().get_texts()]
    assert labels == ["batch: 178 samples", "prompt (reference), same samples"]


def test_the_distribution_counts_only_recorded_advantages_the_dump_has():
    report = rollaudit.audit(rollaudit.load(DUMP_DETAILS), device="cpu", keep_advantages=True)
    figure = _plots.figures(report)["advantage_distribution"]
    recorded = _axes_with_content(figure)[2]
    assert recorded.get_title() == "recorded against prompt"
    assert sum(patch.get_height() for patch in recorded.patches if patch.get_fill()) == 24
    assert recorded.get_legend().get_texts()[0].get_text() == "recorded: 24 samples"
    # The reference's outline over the same 24 samples: its steps add up to 24 too.
    (outline,) = [patch for patch in recorded.patches if not patch.get_fill()]
    heights = outline.get_xy()[1:-1:2, 1]
    assert heights.sum() == 24, heights


def test_no_advantage_figures_without_kept_advantages():
    report = rollaudit.audit(rollaudit.load(FANOUT), device="cpu")
    assert list(_plots.figures(report)) == ["group_sizes"]
    assert list(_plots.panel_svgs(report)) == ["group_sizes"]
