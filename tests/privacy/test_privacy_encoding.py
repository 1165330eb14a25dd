"""Fixed-point encoder (OME Algorithm 1) and the normalisers."""

import numpy as np
import pytest

from fl_privtext.privacy import decode, encode, make_mechanism
from fl_privtext.privacy import normalise as nz
from fl_privtext.privacy.encoding import max_value


@pytest.mark.parametrize(("m", "n"), [(4, 5), (0, 8), (3, 0), (6, 12), (10, 20)])
def test_round_trip_within_resolution(m, n):
    rng = np.random.default_rng(0)
    top = max_value(m, n)
    x = rng.uniform(-top, top, size=(200, 7))
    x[0, :3] = (0.0, top, -top)
    st = encode(x, m, n)
    bits = st.values
    assert bits.dtype == np.uint8 and bits.shape == (200, 7 * (1 + m + n))
    assert set(np.unique(bits)) <= {0, 1}
    assert st.info["saturated"] == 0
    back = decode(bits, m, n)
    assert np.all(np.abs(back - x) < 2.0**-n)


def test_known_code_and_sign_bit():
    bits = encode(np.array([[5.5, -5.5, 0.0, -0.03125]]), 4, 5).values.reshape(4, 10)
    assert bits[0].tolist() == [0, 0, 1, 0, 1, 1, 0, 0, 0, 0]  # + | 0101 | 10000
    assert bits[1].tolist() == [1, 0, 1, 0, 1, 1, 0, 0, 0, 0]  # sign 1 = negative
    assert bits[2].tolist() == [0] * 10
    assert bits[3].tolist() == [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert decode(np.ones((1, 10), np.uint8), 4, 5)[0, 0] == -(16 - 1 / 32)


def test_saturation_is_counted_and_clamped():
    x = np.array([[16.0, -16.0, 100.0, 15.99, 0.5], [-1e6, 3.0, 15.96875, -15.97, 2.0]])
    st = encode(x, 4, 5)
    assert st.info["saturated"] == 4  # 16, -16, 100, -1e6; 15.99 and -15.97 truncate to 15.96875
    back = decode(st.values, 4, 5)
    assert back[0, 0] == pytest.approx(15.96875) and back[0, 1] == pytest.approx(-15.96875)
    assert back[1, 0] == pytest.approx(-15.96875) and back[1, 2] == 15.96875


def test_encoder_rejects_bad_bits_and_values():
    with pytest.raises(ValueError, match="int_bits \\+ frac_bits must be between 1 and 32"):
        encode(np.zeros((1, 1)), 0, 0)
    with pytest.raises(ValueError, match="int_bits must be an integer >= 0"):
        encode(np.zeros((1, 1)), -1, 5)
    with pytest.raises(ValueError, match="finite"):
        encode(np.array([[np.nan]]), 4, 5)


def test_mechanism_reports_saturation_from_release():
    x = np.zeros((3, 1000), dtype=np.float32)
    x[:, 0] = 1000.0  # z-score of the outlier is sqrt(999) ~ 31.6 > 16
    rel = make_mechanism("ome", epsilon=1.0, lam=10.0, dim=1000).release(x, np.random.default_rng(0))
    info = rel.info()
    assert info["encode"]["saturated"] == 3 and info["encode"]["values"] == 3000
    assert info["normalise"]["method"] == "z-score" and info["randomise"]["bits"] == 3 * 10_000
    assert rel.values.dtype == np.float32 and rel.values.shape == (3, 10_000)


def test_zscore_is_per_vector():
    rng = np.random.default_rng(1)
    x = rng.normal(3.0, 5.0, size=(50, 20)).astype(np.float32)
    x[7] = 2.5
    st = nz.zscore(x)
    z = st.values
    assert st.info["constant_rows"] == 1 and np.all(z[7] == 0)
    rows = np.delete(z, 7, axis=0)
    assert np.allclose(rows.mean(axis=1), 0, atol=1e-5) and np.allclose(rows.std(axis=1), 1, atol=1e-5)
    # a row's output depends only on that row
    assert np.allclose(nz.zscore(x[:3]).values, z[:3])


def test_minmax_is_per_vector():
    x = np.array([[2.0, 4.0, 3.0], [-1.0, -1.0, -1.0], [0.0, 10.0, 5.0]], dtype=np.float32)
    st = nz.minmax(x)
    assert st.values.tolist() == [[0.0, 1.0, 0.5], [0.0, 0.0, 0.0], [0.0, 1.0, 0.5]]
    assert st.info["constant_rows"] == 1


def test_l1_l2_box():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(100, 16)).astype(np.float32)
    x[0] = 0.0
    l1n = nz.l1_normalise(x, 2.0).values
    assert np.allclose(np.abs(l1n[1:]).sum(axis=1), 2.0, rtol=1e-5) and np.all(l1n[0] == 0)
    small = x * 0.01
    l1c = nz.l1_clip(np.concatenate([x, small]), 1.0)
    assert l1c.info["clipped_rows"] == 99
    assert np.all(np.abs(l1c.values).sum(axis=1) <= 1.0 + 1e-5)
    assert np.array_equal(l1c.values[100:], small)
    l2c = nz.l2_clip(np.concatenate([x, small]), 1.0)
    assert l2c.info["clipped_rows"] == 99
    assert np.all(np.linalg.norm(l2c.values, axis=1) <= 1.0 + 1e-5)
    assert np.array_equal(l2c.values[100:], small)
    box = nz.box_clip(x, -0.5, 0.5)
    assert box.info["clipped_values"] == int(np.count_nonzero(np.abs(x) > 0.5))
    assert box.values.min() >= -0.5 and box.values.max() <= 0.5
    with pytest.raises(ValueError, match="low < high"):
        nz.box_clip(x, 1.0, 1.0)


def test_batch_validation():
    mech = make_mechanism("laplace-l1", epsilon=1.0, dim=4, sampler="float")
    g = np.random.default_rng(0)
    with pytest.raises(ValueError, match="2-D"):
        mech.privatize(np.zeros(4), g)
    with pytest.raises(ValueError, match="Expected 4 columns"):
        mech.privatize(np.zeros((2, 5)), g)
    with pytest.raises(ValueError, match="finite"):
        mech.privatize(np.full((2, 4), np.inf), g)
    with pytest.raises(ValueError, match="at least 2 columns"):
        make_mechanism("laplace-dpnr-code", epsilon=1.0).privatize(np.zeros((2, 1)), g)
    assert make_mechanism("laplace-l1", epsilon=1.0, sampler="float").privatize(np.zeros((3, 7)), g).shape == (3, 7)
