"""core/report.py's figures: what they draw (known answers) and how they are written (PNG dpi, PDF, SVG)."""
import numpy as np
import pytest
from PIL import Image

from iastudio.core.report import (
    PRINT_DPI,
    curves_figure,
    map_figure,
    means_figure,
    mosaic_figure,
    save_figure,
    weights_figure,
)


def test_weights_figure_draws_w_with_one_colour_bar_and_lines_between_clusters():
    w = np.arange(16, dtype=float).reshape(4, 4) / 15
    fig = weights_figure(w, groups=np.array([0, 0, 1, 1]), levels=(0.0, 2.0))
    ax, bar = fig.axes
    np.testing.assert_allclose(ax.images[0].get_array(), w)
    assert ax.images[0].get_clim() == (0.0, 2.0)
    assert bar.get_ylabel() == "W_ij"
    positions = sorted({float(line.get_xdata()[0]) for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[1]})
    assert positions == [1.5]  # one boundary, between rows 1 and 2
    assert len(ax.lines) == 2  # that boundary across and down


def test_mosaic_figure_draws_the_grey_levels_as_they_are():
    img = np.array([[0, 128], [255, 7]], np.uint8)
    fig = mosaic_figure(img, title="Means")
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), img)
    assert ax.images[0].get_clim() == (0, 255)
    assert ax.get_title() == "Means"
    assert not ax.axison


def test_curves_figure_draws_each_curve_floored_at_1e_6_with_its_full_name():
    fig = curves_figure({"within_max": [0.02, 0.0], "between_min": [0.5, np.nan], "median": [0.4, 0.3]})
    ax = fig.axes[0]
    got = {line.get_label(): line.get_ydata() for line in ax.lines}
    np.testing.assert_allclose(got["within-cluster max"], [0.02, 1e-6])
    np.testing.assert_allclose(got["between-cluster min"], [0.5, 1e-6])
    np.testing.assert_allclose(got["median"], [0.4, 0.3])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["within-cluster max", "between-cluster min",
                                                                     "median"]
    assert ax.get_yscale() == "log"


def test_curves_figure_of_one_iteration_ticks_whole_iterations_only():
    ax = curves_figure({"within_max": [0.02], "between_min": [0.5], "median": [0.4]}).axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks == [0.0, 1.0]  # not -0.04 .. 0.04 around the single point


def test_means_figure_titles_each_tile_and_the_whole():
    means = np.stack([np.eye(4), np.ones((4, 4)), np.zeros((4, 4))])
    fig = means_figure(means, title="Class averages before denoising")
    tiles = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in tiles] == ["Cluster 1", "Cluster 2", "Cluster 3"]
    np.testing.assert_allclose(tiles[1].images[0].get_array(), means[1])
    assert fig._suptitle.get_text() == "Class averages before denoising"
    assert means_figure(means)._suptitle is None


def test_map_figure_puts_each_image_at_its_coordinates_in_its_colour():
    xy = np.array([[0.0, 1.0], [2.0, -1.0]])
    fig = map_figure(xy, ["#ff0000", "#0000ff"], axes=("MDS 1", "MDS 2"))
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.collections[0].get_offsets(), xy)
    np.testing.assert_allclose(ax.collections[0].get_facecolors()[:, :3], [[1, 0, 0], [0, 0, 1]])
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("MDS 1", "MDS 2")


def test_save_figure_writes_print_png_and_vector_pdf_svg(tmp_path):
    save_figure(mosaic_figure(np.zeros((4, 4), np.uint8), width_cm=10.0), tmp_path / "m.png")
    png = Image.open(tmp_path / "m.png")
    assert abs(png.size[0] - round(10 / 2.54 * PRINT_DPI)) <= 1
    np.testing.assert_allclose(png.info["dpi"], (PRINT_DPI, PRINT_DPI), atol=0.5)
    save_figure(curves_figure({"median": [1.0, 0.5]}), tmp_path / "c.pdf")
    assert (tmp_path / "c.pdf").read_bytes().startswith(b"%PDF")
    save_figure(curves_figure({"median": [1.0, 0.5]}), tmp_path / "c.svg")
    assert ">median<" in (tmp_path / "c.svg").read_text()  # text stays text in an SVG


def test_save_figure_refuses_another_format_and_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match=r"c\.jpg"):
        save_figure(curves_figure({"median": [1.0]}), tmp_path / "c.jpg")
    assert list(tmp_path.iterdir()) == []
