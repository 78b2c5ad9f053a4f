import numpy as np
import pytest

from iastudio.core.frc import fourier_ring_correlation, frc_resolution


def _white(seed, shape=(64, 64)):
    return np.random.default_rng(seed).normal(size=shape)


def _low_pass(image, cutoff):
    """Keep the Fourier coefficients at spatial frequencies <= cutoff (cycles/pixel), drop the rest."""
    h, w = image.shape
    f = np.hypot(np.fft.fftfreq(h)[:, None], np.fft.fftfreq(w)[None, :])
    return np.real(np.fft.ifft2(np.fft.fft2(image) * (f <= cutoff)))


def test_identical_images_correlate_everywhere_and_rings_reach_nyquist():
    img = _white(0)
    freq, frc = fourier_ring_correlation(img, img)
    np.testing.assert_allclose(freq, np.arange(33) / 64)
    np.testing.assert_allclose(frc, 1.0, atol=1e-12)
    np.testing.assert_allclose(fourier_ring_correlation(img, 3.0 * img + 0.0)[1], 1.0, atol=1e-12)
    assert frc_resolution(img, img, threshold=0.143) == (0.5, 2.0)


def test_negated_copy_anticorrelates():
    img = _white(1)
    np.testing.assert_allclose(fourier_ring_correlation(img, -img)[1][1:], -1.0, atol=1e-12)


def test_independent_noise_is_near_zero():
    _freq, frc = fourier_ring_correlation(_white(2, (128, 128)), _white(3, (128, 128)))
    # a ring of radius r holds about pi r independent coefficients (a real image's transform is Hermitian):
    # the correlation of independent noise has a spread of about 1 / sqrt(pi r)
    r = np.arange(8, frc.size)
    assert np.all(np.abs(frc[r]) < 4 / np.sqrt(np.pi * r))
    assert abs(frc[r].mean()) < 0.03
    f, res = frc_resolution(_white(2, (128, 128)), _white(3, (128, 128)), threshold=0.5)
    assert f <= 2 / 128
    assert res >= 64


@pytest.mark.parametrize("cutoff", [0.1, 0.25])
def test_low_pass_copy_falls_below_half_at_the_cutoff(cutoff):
    img = _white(4, (96, 96))
    smooth = _low_pass(img, cutoff)
    freq, frc = fourier_ring_correlation(img, smooth)
    assert np.all(frc[1:][freq[1:] < cutoff - 1.5 / 96] > 0.99)
    assert np.all(np.abs(frc[freq > cutoff + 1.5 / 96]) < 1e-9)
    for threshold in (0.5, 0.143):
        f, res = frc_resolution(img, smooth, threshold=threshold)
        assert abs(f - cutoff) <= 1.5 / 96
        assert res == pytest.approx(1 / f)


def test_non_square_images_use_the_short_side():
    freq, frc = fourier_ring_correlation(_white(7, (40, 64)), _white(7, (40, 64)))
    assert freq.size == 21
    assert freq[-1] == pytest.approx(0.5)
    np.testing.assert_allclose(frc, 1.0, atol=1e-12)


def test_bad_input_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="one shape"):
        fourier_ring_correlation(np.zeros((8, 8)), np.zeros((8, 9)))
    with pytest.raises(ValueError, match="threshold"):
        frc_resolution(np.ones((8, 8)), np.ones((8, 8)), threshold=1.5)


def test_blank_image_gives_zero_not_nan():
    _freq, frc = fourier_ring_correlation(np.zeros((16, 16)), _white(8, (16, 16)))
    assert np.all(np.isfinite(frc))
    assert np.all(frc == 0)
