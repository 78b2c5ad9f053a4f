"""The fast gate of the quality benchmark (``benchmarks/bench_quality.py --fast``).

Small sets the defaults were not tuned on in this form: classes of two, two keys that
differ by one tooth, objects saved in frames of different pixel sizes, one class.
IA with every option automatic must find the classes exactly.
"""
import os
import sys

import pytest
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from quality_suite import make_set, suite  # noqa: E402

from iastudio.core.attention import AttentionRun  # noqa: E402
from iastudio.core.preprocess import preprocess  # noqa: E402

GATE = {"mixed-3x2", "keys-detail", "mixed-6-frames", "letters-1"}


@pytest.mark.parametrize("name", sorted(GATE))
def test_defaults_find_the_classes(name):
    spec = next(s for s in suite() if s.name == name)
    images, truth = make_set(spec, split="holdout")
    res = AttentionRun(preprocess(images, size=32).images, backend="numpy", iterations=2, mean_steps=4).run()
    if len(set(truth)) == 1:
        assert res.n_clusters == 1
    else:
        assert res.n_clusters == len(set(truth))
        assert adjusted_rand_score(truth, res.labels) == 1.0


def test_suite_covers_what_the_benchmark_promises():
    specs = suite()
    assert {len(s.sizes) for s in specs} >= {1, 2, 3, 5, 8, 10}
    assert any(min(s.sizes) <= 3 for s in specs)
    assert any(len(set(s.sizes)) > 1 for s in specs)
    assert {s.noise for s in specs} >= {0.0, 0.1, 0.3}
    assert any(s.frames for s in specs)
    assert any(s.rotation == 180 for s in specs)
    assert any(s.rotation == 45 for s in specs)
    _a, la = make_set(specs[0], split="tune")
    _b, lb = make_set(specs[0], split="holdout")
    assert set(la).isdisjoint(lb)  # tune and holdout digits are different classes
    assert {im.shape for im in make_set(next(s for s in specs if s.frames))[0]} != {(64, 64)}


@pytest.mark.parametrize("name", ["keys-detail", "mixed-8x3"])
def test_pruned_runs_find_the_classes_too(name):
    # the K-neighbour path (the previous global-beta read-out of a pruned run merged the classes of 3)
    spec = next(s for s in suite() if s.name == name)
    images, truth = make_set(spec, split="holdout")
    res = AttentionRun(preprocess(images, size=32).images, backend="numpy", iterations=2, mean_steps=4,
                       neighbors=6).run()
    assert res.n_clusters == len(set(truth))
    assert adjusted_rand_score(truth, res.labels) == 1.0
