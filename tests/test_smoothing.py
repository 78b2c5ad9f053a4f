import numpy as np
import pytest

from iastudio.core.smoothing import gaussian_smooth


@pytest.mark.parametrize("sigma", [1.0, 2.0])
def test_delta_becomes_gaussian_with_known_variance(sigma):
    img = np.zeros((2, 41, 41))
    img[:, 20, 20] = 1.0
    out = gaussian_smooth(img, sigma)
    np.testing.assert_allclose(out.sum(axis=(1, 2)), 1.0, atol=1e-6, rtol=1e-5)
    rr = np.arange(41) - 20
    var = (out[0].sum(axis=1) * rr**2).sum()
    assert var == pytest.approx(sigma**2, rel=0.02)
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-8)  # images smoothed independently, same result


def test_zero_sigma_is_identity_and_negative_rejected():
    img = np.random.default_rng(0).random((1, 8, 8))
    assert gaussian_smooth(img, 0) is img
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        gaussian_smooth(img, -1)
