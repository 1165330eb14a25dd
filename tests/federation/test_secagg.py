"""The SecAgg+ secure sum (`fl_privtext.federation.secagg`) through the real ClientApp and Flower's workflow and mod,
on an in-process Grid (no Ray): the round trip, a client dropping mid-protocol, and what the server sees."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, RecordDict

from fl_privtext.federation import secagg
from fl_privtext.federation.secagg import SECAGG_TASKS, SecAggAborted, secure_sum
from fl_privtext.pipeline.clients import build_app
from tests.federation.secagg_grid import InProcessGrid

NODES = [11, 22, 33, 44, 55]
DIM = 300


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1 if name != "_node_id" else 0)


def _vectors() -> dict[int, np.ndarray]:
    g = np.random.default_rng(7)
    return {n: g.normal(0.0, 1.0, DIM) for n in NODES}


@pytest.fixture
def tasks(monkeypatch):
    """Test tasks: each node's fixed vector (scaled by the request's "scale" array); "drop-33" fails on node 33."""
    vecs = _vectors()

    def vector(msg, ctx):  # type: ignore[no-untyped-def]
        scale = float(msg.content.array_records["req"]["scale"].numpy()[0])
        return vecs[ctx.node_id] * scale

    def dropping(msg, ctx):  # type: ignore[no-untyped-def]
        if ctx.node_id == 33:
            raise RuntimeError("node 33 went offline")
        return vector(msg, ctx)

    monkeypatch.setitem(SECAGG_TASKS, "test-vector", vector)
    monkeypatch.setitem(SECAGG_TASKS, "test-drop", dropping)
    return vecs


def _content(scale: float = 1.0) -> RecordDict:
    return RecordDict({"req": ArrayRecord({"scale": Array(np.array([scale]))})})


def test_round_trip_equals_the_plain_sum(tasks):
    grid = InProcessGrid(build_app(), NODES)
    out = secure_sum(grid, NODES, "test-vector", _content(2.0), clipping_range=64.0)
    plain = sum(2.0 * v for v in tasks.values())
    # exact up to rounding each vector to the grid: <= n * step / 2 per coordinate (step = 2 * 64 / 2^22)
    assert out.step == 2 * 64 / 2**22
    err = np.abs(out.total - plain).max()
    assert err <= len(NODES) * out.step / 2
    assert err > 0 or np.allclose(plain / out.step, np.rint(plain / out.step))
    assert out.contributors == NODES and out.dropped == [] and out.rounds == 4 and out.bytes > DIM * 8 * len(NODES)
    # the bound is tight in the sense that a coarser grid has a larger error (the encoding is really used)
    coarse = secure_sum(grid, NODES, "test-vector", _content(2.0), clipping_range=64.0, quantization_range=2**10)
    assert len(NODES) * out.step / 2 < np.abs(coarse.total - plain).max() <= len(NODES) * coarse.step / 2


def test_a_sum_past_the_clipping_range_wraps_around(tasks):
    # documented behaviour: the sum is exact modulo 2c (Kairouz et al.'s modular setting), not clipped per client
    grid = InProcessGrid(build_app(), NODES)
    out = secure_sum(grid, NODES, "test-vector", _content(1.0), clipping_range=1.0)
    plain = sum(tasks.values())
    wrapped = np.mod(plain + 1.0, 2.0) - 1.0
    assert np.abs(out.total - wrapped).max() <= len(NODES) * out.step / 2 + 1e-12
    assert np.abs(plain).max() > 1.0  # the check above is not vacuous


def test_a_client_dropping_mid_protocol_is_survived_and_reported(tasks):
    grid = InProcessGrid(build_app(), NODES)
    out = secure_sum(grid, NODES, "test-drop", _content(), clipping_range=64.0)
    assert out.dropped == [33] and out.contributors == [11, 22, 44, 55]
    assert out.reasons[33] == "refused: internal error"  # the exception text stays on the client (issue #34)
    plain = sum(v for n, v in tasks.items() if n != 33)
    assert np.abs(out.total - plain).max() <= 4 * out.step / 2
    # the stage: node 33 shared its keys (stage 1) and failed at the masked-vector stage (stage 2); the server
    # removed its pairwise masks from the others' vectors with its key shares
    stage2 = [m for m in grid.replies if m.metadata.src_node_id == 33]
    assert len(stage2) == 3 and stage2[-1].has_error() and not stage2[1].has_error()


def test_too_many_dropouts_abort(tasks, monkeypatch):
    def most_drop(msg, ctx):  # type: ignore[no-untyped-def]
        if ctx.node_id != 11:
            raise RuntimeError("offline")
        return tasks[11]

    monkeypatch.setitem(SECAGG_TASKS, "test-most-drop", most_drop)
    with pytest.raises(SecAggAborted, match="halted"):
        secure_sum(InProcessGrid(build_app(), NODES), NODES, "test-most-drop", _content(), clipping_range=64.0)


def test_the_server_sees_masks_not_the_vector(tasks):
    grid = InProcessGrid(build_app(), NODES)
    secure_sum(grid, NODES, "test-vector", _content(), clipping_range=64.0)
    from flwr.common import bytes_to_ndarray
    from flwr.common.secure_aggregation.secaggplus_constants import Key

    masked = {}
    for r in grid.replies:  # the server's whole view of each client
        cfg = r.content.config_records.get(secagg.SECAGG_CONFIGS)
        if cfg is not None and Key.MASKED_PARAMETERS in cfg:
            masked[r.metadata.src_node_id] = np.concatenate([bytes_to_ndarray(b).ravel() for b in
                                                             cfg[Key.MASKED_PARAMETERS]])
        assert all(len(a) == 0 for a in r.content.array_records.values())  # the vector itself never travels
    assert sorted(masked) == NODES
    for n, m in masked.items():
        q = secagg.encode(tasks[n], 64.0, 2**22)
        q_int = np.rint((q + 64.0) / (2 * 64.0 / 2**22))  # what Flower would quantize: the client's integers
        view = m[1:].astype(np.float64)  # [weight factor, vector...]
        assert not np.allclose(view, q_int)
        # uniform modulo 2^32: mean ~ 2^31 and no correlation with the client's vector
        assert abs(view.mean() / 2**32 - 0.5) < 0.1
        assert abs(np.corrcoef(view, tasks[n])[0, 1]) < 0.25


def test_bad_input_is_a_value_error(tasks):
    grid = InProcessGrid(build_app(), NODES)
    with pytest.raises(ValueError, match="at least 2"):
        secure_sum(grid, [11], "test-vector", _content(), clipping_range=1.0)
    with pytest.raises(ValueError, match="clipping_range"):
        secure_sum(grid, NODES, "test-vector", _content(), clipping_range=0.0)


def test_the_noisy_sum_carries_every_contributors_share(tasks, monkeypatch):
    # each client adds N_Z(0, sigma^2) on the grid (the distributed discrete Gaussian): the decoded sum minus the
    # plain sum of the rounded vectors has variance n sigma^2 (in grid units), mean 0
    from fl_privtext.privacy.distributed import noisy_share, round_to_grid
    from fl_privtext.privacy.exact import SecureBits

    c = 64.0
    step = secagg.grid_step(c, 2**22)[1]
    clip, z, m = 1.0, 1.0, 5  # the sum (|.| <= 5) and its noise (std 1) well inside c = 64: no wrap-around

    def noisy(msg, ctx):  # type: ignore[no-untyped-def]
        return noisy_share(tasks[ctx.node_id], clip=clip, noise_multiplier=z, min_clients=m, step=step,
                           bits=SecureBits())

    monkeypatch.setitem(SECAGG_TASKS, "test-noisy", noisy)
    out = secure_sum(InProcessGrid(build_app(), NODES), NODES, "test-noisy", _content(), clipping_range=c)
    plain = sum(round_to_grid(v, clip, step) for v in tasks.values()) * step
    noise = (out.total - plain) / step
    sigma = z * clip / (math.sqrt(m) * step)
    assert np.allclose(noise, np.rint(noise))
    assert noise.var() / (len(NODES) * sigma**2) == pytest.approx(1.0, abs=0.25)  # 300 coordinates: se ~ 8%
    assert abs(noise.mean()) < 4 * math.sqrt(len(NODES)) * sigma / math.sqrt(DIM)


def test_a_client_refuses_too_few_selected_or_too_few_left_to_unmask(tasks, monkeypatch):
    def needs(k):  # type: ignore[no-untyped-def]
        def task(msg, ctx):  # type: ignore[no-untyped-def]
            secagg.require_contributors(ctx, k)
            if ctx.node_id == 33:
                raise RuntimeError("node 33 went offline")
            return tasks[ctx.node_id]
        return task

    # 5 selected, policy needs 6: every client refuses at the masked-vector stage
    monkeypatch.setitem(SECAGG_TASKS, "test-needs-6", needs(6))
    with pytest.raises(SecAggAborted, match="refused: too few contributors"):
        secure_sum(InProcessGrid(build_app(), NODES), NODES, "test-needs-6", _content(), clipping_range=64.0)
    # policy needs 5, one drops: 4 left; the threshold (3) would let the server unmask, the clients refuse
    monkeypatch.setitem(SECAGG_TASKS, "test-needs-5", needs(5))
    with pytest.raises(SecAggAborted, match="refused: too few contributors"):
        secure_sum(InProcessGrid(build_app(), NODES), NODES, "test-needs-5", _content(), clipping_range=64.0)
    # needs 4: the same dropout is accepted
    monkeypatch.setitem(SECAGG_TASKS, "test-needs-4", needs(4))
    out = secure_sum(InProcessGrid(build_app(), NODES), NODES, "test-needs-4", _content(), clipping_range=64.0)
    assert out.dropped == [33]
