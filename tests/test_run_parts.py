"""The parts of a run outside AttentionRun (core/run_steps.py, run_readout.py, run_output.py): known answers."""
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from iastudio.core.run_output import host_view, max_abs_diff, rows_cols
from iastudio.core.run_readout import (
    GUARD_GAIN,
    guard_note,
    guard_verdict,
    read_labels,
    same_partition,
    separation,
    settle_note,
)
from iastudio.core.run_steps import entry_transforms, with_mirrors

# two tight pairs far apart: {0, 1} and {2, 3}
D = np.array([[0.0, 0.1, 1.0, 1.0],
              [0.1, 0.0, 1.0, 1.0],
              [1.0, 1.0, 0.0, 0.1],
              [1.0, 1.0, 0.1, 0.0]])
INPUTS = (D, None, None, None)
NONE_BLANK = np.zeros(4, dtype=bool)


def test_with_mirrors_routes_each_weight_to_the_image_or_its_mirror():
    images = np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3)
    w = np.array([[0.5, 0.2], [0.5, 0.8]])
    init = np.arange(12.0).reshape(2, 2, 3)
    mirrored = np.array([[False, True], [False, False]])
    same = with_mirrors(images, w, init, mirrored, group="se2")
    assert same[0] is images
    assert same[1] is w
    assert same[2] is init
    src, w2, init2 = with_mirrors(images, w, init, mirrored, group="e2")
    assert_array_equal(src[:2], images)
    assert_array_equal(src[2:], images[:, :, ::-1])  # flipped left-right
    assert_allclose(w2, [[0.5, 0.0], [0.5, 0.8], [0.0, 0.2], [0.0, 0.0]])
    assert_array_equal(init2, np.concatenate([init, init]))


class _State:
    def __init__(self, t):
        self.t = t

    def transforms(self, n_sources):
        assert n_sources == self.t.shape[0]
        return self.t


def test_entry_transforms_fold_the_mirror_sources_back():
    t = np.arange(4 * 2 * 3, dtype=float).reshape(4, 2, 3)  # sources [v0, v1, flip v0, flip v1]
    mirrored = np.array([[True, False], [False, True]])
    out = entry_transforms(_State(t), n=2, n_sources=4, mirrored=mirrored)
    assert_array_equal(out[0, 0], t[2, 0])
    assert_array_equal(out[0, 1], t[0, 1])
    assert_array_equal(out[1, 0], t[1, 0])
    assert_array_equal(out[1, 1], t[3, 1])
    plain = t[:2]
    assert entry_transforms(_State(plain), n=2, n_sources=2, mirrored=None) is plain


def test_host_view_fills_the_pairs_a_pruned_run_did_not_align():
    d = sp.csr_matrix(np.array([[0.0, 0.3, 0.0], [0.3, 0.0, 0.5], [0.0, 0.5, 0.0]]))
    dense = host_view(d, fill_missing=True)
    assert dense.dtype == np.float32
    assert_allclose(dense, [[0, 0.3, 0.5], [0.3, 0, 0.5], [0.5, 0.5, 0]], atol=1e-7)
    assert_allclose(host_view(d), [[0, 0.3, 0], [0.3, 0, 0.5], [0, 0.5, 0]], atol=1e-7)
    assert_array_equal(rows_cols(D, np.array([0, 2])), [[0.0, 1.0], [1.0, 0.0]])
    assert_array_equal(rows_cols(sp.csr_matrix(D), np.array([0, 2])).toarray(), [[0.0, 1.0], [1.0, 0.0]])
    assert max_abs_diff(D, D * 0.5) == pytest.approx(0.5)
    assert max_abs_diff(sp.csr_matrix(D), sp.csr_matrix(D * 0.5)) == pytest.approx(0.5)


def test_read_labels_puts_blank_images_in_a_cluster_of_their_own():
    d = np.zeros((5, 5))
    d[:4, :4] = D
    blank = np.array([False, False, False, False, True])
    labels, choice = read_labels(d, blank=blank, clusters=2)
    assert same_partition(labels[:4], [0, 0, 1, 1])
    assert labels[4] == 2
    assert choice.k == 2
    all_blank, trivial = read_labels(np.zeros((3, 3)), blank=np.ones(3, dtype=bool), clusters="auto")
    assert_array_equal(all_blank, [0, 0, 0])
    assert trivial.method == "trivial"


def test_same_partition_ignores_the_cluster_numbers():
    assert same_partition([0, 0, 1], [1, 1, 0])
    assert not same_partition([0, 1, 1], [0, 0, 1])


def test_the_guard_keeps_a_clear_improvement_and_refuses_a_mix():
    good, mixed = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    assert guard_verdict(good, good[::-1], inputs=INPUTS, blank=NONE_BLANK) is None  # the same clusters
    assert guard_verdict(mixed, good, inputs=INPUTS, blank=NONE_BLANK) is None  # fits the inputs better
    refused = guard_verdict(good, mixed, inputs=INPUTS, blank=NONE_BLANK)
    assert refused is not None
    before, after = refused
    assert before == pytest.approx(separation(D, good, blank=NONE_BLANK))
    assert after == pytest.approx(separation(D, mixed, blank=NONE_BLANK))
    assert after < before + GUARD_GAIN
    # silhouette of the tight pairs: a = 0.1, b = 1.0 -> 1 - 0.1 / 1.0
    assert before == pytest.approx(0.9)


def test_guard_notes_name_the_iteration_and_what_was_kept():
    assert guard_note(1, 0.9, None) == (
        "Kept the clusters the run started from: iteration 1 moved images between clusters without making them "
        "fit better, so it was undone. Details: "
        "iteration 1 moved images between clusters without fitting the input images better (silhouette on the "
        "input distances 0.900 -> not defined (one cluster, or each image alone)); kept the clusters of the input "
        "images and stopped")
    assert guard_note(3, 0.5, 0.25, forecast=True) == (
        "Stopped after iteration 2: another iteration would move images between clusters without making them fit "
        "better. Details: "
        "iteration 3 not run: its forecast (the distances of its means estimated from the current distances and "
        "W) moves images between clusters without fitting the input images better (silhouette on the input "
        "distances 0.500 -> 0.250); kept the clusters of iteration 2 and stopped")


def test_the_guards_notes_say_first_in_plain_words_where_the_run_stopped():
    """The trial: "iteration 2 not run: its forecast (the distances of its means estimated from the current
    distances and W) …" was all a user read; the iterations asked for were not said."""
    assert guard_note(2, 0.488, 0.487, forecast=True, asked=3).startswith(
        "Stopped after iteration 1 of 3: another iteration would move images between clusters without making "
        "them fit better. Details: iteration 2 not run: its forecast")
    assert "(silhouette on the input distances 0.488 -> 0.487)" in guard_note(2, 0.488, 0.487, forecast=True, asked=3)
    assert guard_note(1, 0.3, 0.2, forecast=True, asked=3).startswith(
        "Stopped before the first iteration of 3: an iteration would move images between clusters without making "
        "them fit better. Details: ")
    assert guard_note(3, 0.5, 0.25, asked=4).startswith(
        "Stopped after iteration 2 of 4: iteration 3 moved images between clusters without making them fit "
        "better, so it was undone. Details: ")
    assert guard_note(1, 0.5, 0.25, asked=4).startswith("Kept the clusters the run started from (0 of 4 iterations): ")
    assert settle_note(2, asked=3).startswith(
        "Stopped after iteration 1 of 3: another iteration would leave the clusters as they are. Details: "
        "iteration 2 not run: its forecast")
