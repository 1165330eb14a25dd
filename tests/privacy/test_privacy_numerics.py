"""Numerically hostile inputs: finite, in-domain uploads or a clear error; never NaN or inf in an upload."""

import numpy as np
import pytest

from fl_privtext.privacy import make_mechanism
from fl_privtext.privacy.normalise import TINY
from tests.samplers import float_mechanism

HOSTILE = {
    "subnormal": [[1e-39, 0.0, 0.0, 0.0]],
    "huge_spread": [[3e38, -3e38, 0.0, 0.0]],
    "subnormal_spread": [[1e-40, 2e-40, 0.0, 0.0]],
    "huge": [[3e38, 3e38, 3e38, -3e38]],
    "zero": [[0.0, 0.0, 0.0, 0.0]],
}
MECHS = [("laplace-l1", {}), ("laplace-l1", {"sampler": "secure", "dim": 4}), ("laplace-dpnr", {"dim": 4}),
         ("laplace-box", {"dim": 4}), ("gaussian", {"delta": 1e-5}), ("ome", {"dim": 4, "lam": 100.0}),
         ("bitrr", {"dim": 4}), ("none", {})]


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize(("name", "params"), MECHS)
def test_hostile_rows_give_finite_in_domain_uploads(name, params, case, gen):
    mech = float_mechanism(name, **({"epsilon": 1.0} if name != "none" else {}), **params)
    rel = mech.release(np.array(HOSTILE[case], dtype=np.float32), gen)
    assert np.isfinite(rel.values).all(), (name, case, rel.values)
    norm = rel.stages[0].values
    assert np.isfinite(norm).all()
    if name.startswith("laplace-l1"):
        assert np.abs(norm).sum() == pytest.approx(1.0, rel=1e-6) or not np.abs(norm).any()
    if name == "laplace-dpnr":
        assert norm.min() >= 0 and norm.max() <= 1
    if name == "gaussian":
        assert np.linalg.norm(norm) <= 1.0 + 1e-6


def test_the_published_overflow_cases_are_normalised_exactly(gen):
    # laplace-l1 on [1e-39, 0, 0, 0] once uploaded [inf, nan, nan, nan]; now the float64 rule applies
    l1 = make_mechanism("laplace-l1", epsilon=1.0, sampler="float").release(np.array([[1e-20, 0, 0, 0]], np.float32), gen)
    np.testing.assert_array_equal(l1.stages[0].values, [[1.0, 0, 0, 0]])
    dpnr = make_mechanism("laplace-dpnr", epsilon=1.0, dim=4, sampler="float").release(np.array([[3e38, -3e38, 0, 0]], np.float32), gen)
    np.testing.assert_allclose(dpnr.stages[0].values, [[1.0, 0.0, 0.5, 0.5]])
    # below TINY a row has no direction at float32 precision: the documented rule makes it the zero vector
    tiny = make_mechanism("laplace-l1", epsilon=1.0, sampler="float").release(np.array([[TINY / 10, 0, 0, 0]], np.float32), gen)
    assert tiny.info()["normalise"]["zero_rows"] == 1 and not tiny.stages[0].values.any()


def test_non_finite_rows_are_refused_naming_the_row(gen):
    x = np.zeros((5, 4), np.float32)
    x[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"row\(s\) \[3\] of this batch hold NaN or inf"):
        make_mechanism("laplace-l1", epsilon=1.0, sampler="float").privatize(x, gen)
    with pytest.raises(ValueError, match=r"row\(s\) \[0\]"):  # float64 beyond float32's range
        make_mechanism("laplace-l1", epsilon=1.0, sampler="float").privatize(np.array([[1e39, 0.0]]), gen)


def test_huge_epsilon_cli_is_a_one_line_error(capsys):
    from fl_privtext.cli import main

    rc = main(["privacy-report", "bitrr", "--set", "epsilon=1e4", "--set", "dim=1", "--set", "int-bits=0",
               "--set", "frac-bits=1"])
    err = capsys.readouterr().err
    assert rc == 2 and "below 2^-53" in err and len(err.strip().splitlines()) == 1
    assert main(["privacy-report", "laplace-l1", "--set", "epsilon=1e300", "--set", "sampler=float"]) == 0  # tiny noise
    assert main(["privacy-report", "gaussian", "--set", "epsilon=1e300", "--set", "delta=1e-5"]) == 2
