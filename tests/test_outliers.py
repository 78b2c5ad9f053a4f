"""core.outliers: the images that fit their cluster much worse than the rest of it, named."""
import numpy as np
import pytest
from numpy.testing import assert_array_equal

from iastudio.core.outliers import MARGIN, poor_fit_line, poor_fits


def test_a_score_far_below_its_own_clusters_is_a_poor_fit_and_the_lowest_comes_first():
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], 20)
    scores = np.concatenate([0.99 + 0.002 * rng.standard_normal(20),  # tight particles
                             0.80 + 0.05 * rng.standard_normal(20),  # a loose cluster: 0.65 is within its spread
                             0.95 + 0.01 * rng.standard_normal(20)])
    scores[[3, 25, 47, 48]] = [0.60, 0.65, 0.30, 0.80]
    assert_array_equal(poor_fits(labels, scores), [47, 3, 48])


def test_the_margin_keeps_clusters_whose_scores_all_agree_from_naming_their_lowest():
    labels = np.zeros(10, dtype=int)
    scores = np.full(10, 0.990)
    scores[0] = 0.990 - MARGIN / 2  # many MADs below (the MAD is 0), but close in score
    assert poor_fits(labels, scores).size == 0
    scores[0] = 0.990 - 1.5 * MARGIN
    assert_array_equal(poor_fits(labels, scores), [0])


def test_small_clusters_unscored_and_unassigned_images_are_never_named():
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, -1])
    scores = np.array([0.99, 0.99, 0.99, 0.2, 0.99, 0.99, np.nan, 0.99, 0.99, 0.99, 0.0])
    assert poor_fits(labels, scores).size == 0  # cluster 0 has 4 images: no rest to stand out from
    assert_array_equal(poor_fits(labels, scores, min_cluster=4), [3])
    with pytest.raises(ValueError, match="differ in shape"):
        poor_fits(labels, scores[:-1])


def test_the_line_names_the_first_files_and_counts_the_rest():
    assert poor_fit_line(["/data/a/odd_64x37.png"]).endswith("(junk, or a stray?): odd_64x37.png")
    line = poor_fit_line([f"/d/p{i}.tif" for i in range(5)], shown=2)
    assert line.startswith("5 images fit their clusters much worse than the rest")
    assert line.endswith("p0.tif, p1.tif and 3 more")
