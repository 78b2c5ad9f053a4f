import os

# GUI tests run without a screen unless the caller chose a platform
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from iastudio.core.demos import base_shapes  # noqa: E402


@pytest.fixture(scope="session")
def shape_images():
    """The three demo base shapes on a 64-px canvas, unit norm, float64."""
    bases, _ = base_shapes()
    return bases / np.linalg.norm(bases.reshape(3, -1), axis=1)[:, None, None]


def smooth_blob(size=32, seed=0):
    """A smooth random test image (float64), zero near the border."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    img = gaussian_filter(rng.random((size, size)), 2.0)
    yy, xx = np.mgrid[:size, :size] - (size - 1) / 2
    img *= np.exp(-(yy**2 + xx**2) / (2 * (size / 6) ** 2))
    return img / img.max()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A private home for the app's logs, settings and autosave (one per test module)."""
    home = tmp_path_factory.mktemp("home")
    old = os.environ.get("IA_STUDIO_LOG_DIR")
    os.environ["IA_STUDIO_LOG_DIR"] = str(home / "logs")
    yield home
    if old is None:
        os.environ.pop("IA_STUDIO_LOG_DIR", None)
    else:
        os.environ["IA_STUDIO_LOG_DIR"] = old
