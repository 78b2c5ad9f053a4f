"""The contrast transfer function and phase flipping (core/ctf.py)."""
import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.backend import to_host
from iastudio.core.ctf import apply_ctf, ctf_2d, ctf_phase_flip, electron_wavelength

SCOPE = {"pixel_size": 3.0, "voltage": 300.0, "spherical_aberration": 2.7, "amplitude_contrast": 0.1}


def _random_stack(n=3, side=48, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, side, side))


def test_electron_wavelength_at_known_voltages():
    # 0.0251 Å at 200 kV, 0.0197 Å at 300 kV (relativistic; e.g. Frank 2006, table 2.1)
    assert_allclose(electron_wavelength(300), 0.019687, atol=2e-6)
    assert_allclose(electron_wavelength(200), 0.025079, atol=2e-6)
    with pytest.raises(ValueError, match="voltage"):
        electron_wavelength(0)


def test_ctf_at_a_bin_where_chi_is_a_quarter_turn():
    # bin (0, 4) of a 48-px frame at 2 Å/px: k = 4 / 96 1/Å; with Cs = 0 and df = 1 / (2 lambda k^2)
    # chi = pi / 2, so CTF = -sqrt(1 - A^2) sin(pi/2) - A cos(pi/2) = -sqrt(1 - 0.01)
    lam = electron_wavelength(300)
    k = 4 / 96
    df = 1 / (2 * lam * k ** 2)
    h = ctf_2d((48, 48), df, pixel_size=2.0, voltage=300, spherical_aberration=0.0, amplitude_contrast=0.1)
    assert_allclose(h[0, 4], -np.sqrt(0.99), rtol=1e-12)
    assert_allclose(h[4, 0], -np.sqrt(0.99), rtol=1e-12)  # no astigmatism: the same along every direction
    assert_allclose(h[0, 0], -0.1, rtol=1e-12)  # frequency 0: minus the amplitude contrast (CTFFIND4's sign)
    hb = ctf_2d((48, 48), df, pixel_size=2.0, voltage=300, spherical_aberration=0.0, amplitude_contrast=0.1,
                b_factor=100.0)
    assert_allclose(hb[0, 4], -np.sqrt(0.99) * np.exp(-100 * k ** 2 / 4), rtol=1e-12)


def test_phase_and_amplitude_contrast_act_with_the_same_sign():
    # Cs = 0, df = 1 / (lambda k^2) at bin (0, 4): chi = pi there, where a pure phase CTF has its first zero;
    # with amplitude contrast CTF = -sqrt(1 - A^2) sin(pi) - A cos(pi) = +A: past the first zero already
    lam = electron_wavelength(300)
    k4 = 4 / 96
    df = 1 / (lam * k4 ** 2)
    h = ctf_2d((48, 48), df, pixel_size=2.0, voltage=300, spherical_aberration=0.0, amplitude_contrast=0.1)
    assert_allclose(h[0, 4], 0.1, rtol=1e-9)
    # every bin: the closed form -sqrt(1 - A^2) sin(chi) - A cos(chi), chi = pi lambda df k^2
    k = np.hypot(*np.meshgrid(np.fft.fftfreq(48, d=2.0), np.fft.fftfreq(48, d=2.0)))
    chi = np.pi * lam * df * k ** 2
    assert_allclose(h, -np.sqrt(0.99) * np.sin(chi) - 0.1 * np.cos(chi), atol=1e-12)
    # in underfocus the first lobe has one sign from frequency 0 to its zero at chi = pi - arcsin(A)
    first = chi < np.pi - np.arcsin(0.1) - 1e-9
    assert np.all(h[first] < 0)
    assert np.all(h[(chi > np.pi - np.arcsin(0.1) + 1e-9) & (chi < 2 * np.pi - np.arcsin(0.1) - 1e-9)] > 0)


def test_phase_flip_restores_the_sign_of_every_fourier_coefficient():
    x = _random_stack()
    defocus = np.array([10_000.0, 17_500.0, 25_000.0])
    y = apply_ctf(x, defocus, b_factor=100.0, **SCOPE)
    h = ctf_2d((48, 48), defocus, **SCOPE)
    fx = np.fft.fft2(x)
    before = np.real(np.fft.fft2(y) * np.conj(fx))  # the CTF's sign times |X|^2
    assert (before < 0).mean() > 0.3  # the CTF did invert many coefficients
    flipped = ctf_phase_flip(y, defocus, **SCOPE)
    assert np.isrealobj(flipped)
    after = np.fft.fft2(flipped)
    # |CTF| X: the phase of each coefficient is the original one (where the CTF is not ~0)
    ok = np.abs(h) > 1e-3
    assert_allclose(np.angle(after[ok] * np.conj(fx[ok])), 0.0, atol=1e-6)
    henv = ctf_2d((48, 48), defocus, b_factor=100.0, **SCOPE)
    assert_allclose(after, np.abs(henv) * fx, atol=1e-9)


def test_defocus_zero_is_the_identity_up_to_the_amplitude_contrast():
    x = _random_stack(n=2, seed=1)
    no_cs = dict(SCOPE, spherical_aberration=0.0)
    assert_allclose(ctf_2d((48, 48), 0.0, **no_cs), -0.1, rtol=1e-12)
    assert_allclose(apply_ctf(x, 0.0, **no_cs), -0.1 * x, atol=1e-12)
    assert_allclose(ctf_phase_flip(x, 0.0, **no_cs), -x, atol=1e-12)  # in focus the CTF is -A everywhere
    assert_allclose(ctf_phase_flip(apply_ctf(x, 0.0, **no_cs), 0.0, **no_cs), 0.1 * x, atol=1e-12)  # |CTF| x


def test_defocus_must_match_the_stack():
    x = _random_stack(n=3)
    with pytest.raises(ValueError, match="one defocus per image: 2 values for 3 images"):
        ctf_phase_flip(x, [1e4, 2e4], **SCOPE)
    with pytest.raises(ValueError, match="stack"):
        apply_ctf(x[0], 1e4, **SCOPE)
    with pytest.raises(ValueError, match="amplitude_contrast"):
        ctf_2d((8, 8), 1e4, pixel_size=1.0, amplitude_contrast=1.0)


def test_phase_flip_on_the_gpu_matches_numpy(gpu):
    xp = gpu.xp
    x = _random_stack(n=2, seed=2)
    defocus = [12_000.0, 21_000.0]
    got = ctf_phase_flip(xp.asarray(x), defocus, **SCOPE)
    assert type(got) is not np.ndarray
    assert_allclose(to_host(got), ctf_phase_flip(x, defocus, **SCOPE), atol=1e-10)


@pytest.mark.slow  # 1-4 s: two sets of 32 projections on a 96-px frame
def test_the_noise_suite_ctf_sets_and_phase_flipping_them():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from noise_suite import CTF_MICROSCOPE, ctf_defocus, make_noise_set, noise_suite

    specs = noise_suite(fast=True, ctf=True)
    assert [s.name for s in specs] == ["cryo-ctf-clean-8", "cryo-ctf-snr0.3-12"]
    assert all(s.ctf for s in specs)
    spec, twin = specs[0], noise_suite(fast=True)[0]
    _, labels, clean, truth = make_noise_set(spec, clean_images=True)
    _, labels0, clean0, truth0 = make_noise_set(twin, clean_images=True)
    assert labels == labels0  # the same poses as the CTF-free twin: only the CTF differs
    assert_allclose(clean, clean0)
    defocus = ctf_defocus(spec)
    assert defocus.shape == (32,)
    assert defocus.min() >= 10_000
    assert defocus.max() <= 25_000

    def corr(a, b):
        return np.corrcoef(a.ravel(), b.ravel())[0, 1]

    scope = {k: v for k, v in CTF_MICROSCOPE.items() if k != "b_factor"}
    before = corr(truth, truth0)
    after = corr(ctf_phase_flip(truth, defocus, **scope), truth0)
    assert before < 0 < after  # the CTF inverted the particles' contrast; flipping turns it back


# -- astigmatism (RELION's rlnDefocusU / rlnDefocusV / rlnDefocusAngle) ------------------------------------------

FINE = {"pixel_size": 1.5, "voltage": 300.0, "spherical_aberration": 2.7, "amplitude_contrast": 0.1}


def _first_zero(profile):
    """The index of the first sign change along a profile from frequency 0."""
    return int(np.flatnonzero(np.diff(np.sign(profile)) != 0)[0]) + 1


def test_an_astigmatic_ctf_with_equal_defocus_is_today_s_ctf_bit_for_bit():
    df = np.array([10_000.0, 22_000.0])
    plain = ctf_2d((40, 48), df, b_factor=50.0, **FINE)
    same = ctf_2d((40, 48), df, defocus_v=df, astigmatism_angle=[17.0, 123.0], b_factor=50.0, **FINE)
    np.testing.assert_array_equal(same, plain)
    x = _random_stack(n=2, side=40)
    np.testing.assert_array_equal(ctf_phase_flip(x, df, defocus_v=df, astigmatism_angle=33.0, **FINE),
                                  ctf_phase_flip(x, df, **FINE))


@pytest.mark.parametrize(("angle", "v_angle"), [(0.0, 90.0), (90.0, 0.0), (45.0, -45.0), (-45.0, 45.0)])
def test_along_the_u_axis_the_ctf_is_the_isotropic_one_of_du_and_along_v_that_of_dv(angle, v_angle):
    du, dv, side = 18_000.0, 12_000.0, 128
    h = ctf_2d((side, side), du, defocus_v=dv, astigmatism_angle=angle, **FINE)
    iso_u, iso_v = ctf_2d((side, side), du, **FINE), ctf_2d((side, side), dv, **FINE)
    half = np.arange(side // 2)
    # the lines through frequency 0 at 0°, 90°, 45° and -45° from x (towards y, the row index), on FFT bins
    line = {0.0: (half * 0, half), 90.0: (half, half * 0), 45.0: (half, half), -45.0: (-half % side, half)}
    u_line, v_line = line[angle], line[v_angle]
    assert_allclose(h[u_line], iso_u[u_line], atol=1e-12)
    assert_allclose(h[v_line], iso_v[v_line], atol=1e-12)
    # so the first zero lies where dU's isotropic CTF has it along U, dV's along V: further out for less defocus
    assert _first_zero(h[u_line]) == _first_zero(iso_u[u_line])
    assert _first_zero(h[v_line]) == _first_zero(iso_v[v_line])
    assert _first_zero(h[u_line]) < _first_zero(h[v_line])


def test_turning_the_astigmatism_angle_by_90_degrees_swaps_u_and_v():
    du, dv = 21_000.0, 14_000.0
    for angle in (0.0, 30.0, 77.0):
        assert_allclose(ctf_2d((64, 64), du, defocus_v=dv, astigmatism_angle=angle + 90.0, **FINE),
                        ctf_2d((64, 64), dv, defocus_v=du, astigmatism_angle=angle, **FINE), atol=1e-12)
        assert_allclose(ctf_2d((64, 64), du, defocus_v=dv, astigmatism_angle=angle + 180.0, **FINE),
                        ctf_2d((64, 64), du, defocus_v=dv, astigmatism_angle=angle, **FINE), atol=1e-12)


def test_the_astigmatic_ctf_at_every_bin_is_the_closed_form_of_the_azimuth():
    # RELION's deltaf(a) = (dU + dV) / 2 + (dU - dV) / 2 cos(2 (a - angle)), a = atan2(ky, kx); Cs = 0
    du, dv, angle = 16_000.0, 11_000.0, 25.0
    h = ctf_2d((48, 48), du, defocus_v=dv, astigmatism_angle=angle, pixel_size=2.0, voltage=300.0,
               spherical_aberration=0.0, amplitude_contrast=0.1)
    ky, kx = np.meshgrid(np.fft.fftfreq(48, d=2.0), np.fft.fftfreq(48, d=2.0), indexing="ij")
    df = 0.5 * (du + dv) + 0.5 * (du - dv) * np.cos(2 * (np.arctan2(ky, kx) - np.deg2rad(angle)))
    chi = np.pi * electron_wavelength(300) * df * (kx ** 2 + ky ** 2)
    assert_allclose(h, -np.sqrt(0.99) * np.sin(chi) - 0.1 * np.cos(chi), atol=1e-12)


def test_flipping_an_astigmatic_image_with_its_astigmatism_beats_the_mean_defocus():
    x = _random_stack(n=4, side=64, seed=3)
    du, dv, angle = np.array([15_000.0, 20_000.0, 12_000.0, 24_000.0]), np.array([13_500.0, 19_000.0, 11_000.0,
                                                                                   22_500.0]), [30.0, 120.0, 0.0, 75.0]
    seen = apply_ctf(x, du, defocus_v=dv, astigmatism_angle=angle, **FINE)
    right = ctf_phase_flip(seen, du, defocus_v=dv, astigmatism_angle=angle, **FINE)
    mean = ctf_phase_flip(seen, 0.5 * (du + dv), **FINE)

    def agree(flipped):
        """The share of Fourier coefficients (not at a CTF zero) whose sign is the unfiltered image's."""
        inner = np.real(np.fft.fft2(flipped) * np.conj(np.fft.fft2(x)))
        return float(np.mean(inner[np.abs(inner) > 1e-9] > 0))

    assert agree(right) == 1.0
    assert agree(mean) < 0.95
    for k in range(len(x)):
        assert np.corrcoef(right[k].ravel(), x[k].ravel())[0, 1] > np.corrcoef(mean[k].ravel(), x[k].ravel())[0, 1]


def test_astigmatic_values_must_match_the_stack():
    with pytest.raises(ValueError, match="one defocus_v per image: 2 values for 3 images"):
        apply_ctf(_random_stack(), 1e4, defocus_v=[1e4, 1.1e4], **SCOPE)
    with pytest.raises(ValueError, match="one astigmatism_angle per image"):
        ctf_phase_flip(_random_stack(), 1e4, defocus_v=1.1e4, astigmatism_angle=[0.0, 1.0], **SCOPE)


@pytest.mark.slow  # 1-3 s: two sets of 32 projections on a 96-px frame
def test_the_noise_suite_astigmatic_ctf_set_and_flipping_it_with_its_astigmatism():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from noise_suite import CTF_MICROSCOPE, ctf_astigmatism, ctf_defocus, make_noise_set, noise_suite

    spec, twin = noise_suite(fast=True, ctf=True, astigmatism=True)[0], noise_suite(fast=True)[0]
    assert spec.name == "cryo-ctf-astig-clean-8"
    u, v, angle = ctf_astigmatism(spec)
    assert_allclose(0.5 * (u + v), ctf_defocus(spec))  # the same mean defocus as the set without astigmatism
    assert (u - v).min() >= 500
    assert (u - v).max() <= 1500
    assert angle.min() >= 0
    assert angle.max() < 180
    _, _, _, truth = make_noise_set(spec, clean_images=True)
    _, _, _, truth0 = make_noise_set(twin, clean_images=True)
    scope = {k: val for k, val in CTF_MICROSCOPE.items() if k != "b_factor"}
    right = ctf_phase_flip(truth, u, defocus_v=v, astigmatism_angle=angle, **scope)
    mean = ctf_phase_flip(truth, 0.5 * (u + v), **scope)

    def corr(a, b):
        return np.corrcoef(a.ravel(), b.ravel())[0, 1]

    assert corr(truth, truth0) < 0 < corr(mean, truth0) < corr(right, truth0)
