"""DP-FedAvg pieces through public APIs: the client's clipping and the RDP accountant (dp-accounting, installed by
flwr[dp]) agree with Flower's own (internal) implementations, which stay the reference here only."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext.federation.phase_a import clip_update
from fl_privtext.federation.training import dp_fedavg_guarantee


def test_clip_update_scales_the_whole_update_to_the_norm_and_matches_flowers():
    from flwr.supercore.differential_privacy import compute_clip_model_update

    g = np.random.default_rng(0)
    old = [g.normal(size=(3, 4)).astype(np.float32), g.normal(size=5).astype(np.float32)]
    new = [o + g.normal(size=o.shape).astype(np.float32) for o in old]
    clipped = clip_update(new, old, 0.5)
    norm = np.sqrt(sum(float(np.sum((c.astype(np.float64) - o) ** 2)) for c, o in zip(clipped, old)))
    assert norm == pytest.approx(0.5, rel=1e-5)
    ref = [n.copy() for n in new]
    compute_clip_model_update(param1=ref, param2=old, clipping_norm=0.5)
    for a, b in zip(clipped, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert all(np.array_equal(a, b) for a, b in zip(clip_update(new, old, 1e6), new))  # inside the ball: unchanged


def test_dp_fedavg_accountant_equals_flowers_wrapper_of_the_same_events():
    from flwr.supercore.privacy_accounting import (
        GaussianPrivacyEvent,
        NeighboringRelation,
        PrivacyConfig,
        SamplingMethod,
    )
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    ours = dp_fedavg_guarantee(noise_multiplier=1.0, num_clients=10, clients_per_round=3, rounds=20, delta=1e-5)
    acct = RdpAccountant(PrivacyConfig(target_delta=1e-5, population_size=10,
                                       neighboring_relation=NeighboringRelation.REPLACE_ONE,
                                       sampling_method=SamplingMethod.WITHOUT_REPLACEMENT))
    acct.compose(GaussianPrivacyEvent(noise_multiplier=0.5, sample_size=3, population_size=10), count=20)
    assert ours["epsilon"] == pytest.approx(acct.get_privacy_spent(1e-5).epsilon, rel=1e-9)
    more = dp_fedavg_guarantee(noise_multiplier=2.0, num_clients=10, clients_per_round=3, rounds=20, delta=1e-5)
    assert 0 < more["epsilon"] < ours["epsilon"]  # more noise, less epsilon
