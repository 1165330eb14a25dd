"""The client's policy and ledger without Flower (issue #22): closed forms, replay, persistence, refusals."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from fl_privtext.client import (
    POLICY_ENV,
    ClientData,
    ClientPolicy,
    Ledger,
    Refused,
    client_upload,
    mechanism_for,
    policy_from,
    release_on_device,
    release_upload,
)
from fl_privtext.client.guard import within_budget
from fl_privtext.config import ExperimentConfig
from fl_privtext.public import PublicSpec
from fl_privtext.report.accounting import privacy_summary
from tests.refusals import refused


def _data(n: int = 8, dim: int = 4, users: np.ndarray | None = None) -> ClientData:
    g = np.random.default_rng(0)
    return ClientData(shards=[np.arange(n)], labels=g.integers(0, 2, n), num_classes=2,
                      features=g.normal(size=(n, dim)).astype(np.float32),
                      users=np.zeros(n, np.int64) if users is None else users, test=np.ones(n, bool))


CLOSED = {"privacy.epsilon": 0.5, "privacy.label-epsilon": 2.0, "federation.rounds": 3, "run.seeds": 2,
          "federation.num-clients": 1}


def test_closed_form_120_charged_by_the_client_and_reported_by_the_server(tmp_path):
    # 8 records of one user x 3 rounds x 2 seeds x (0.5 + 2) = 120, in the client's ledger and the server's total
    cfg = ExperimentConfig.from_flat(CLOSED)
    data, policy = _data(), ClientPolicy.from_points([cfg])
    released = []
    for seed in range(2):
        rows = []
        for rnd in range(3):
            up, charged = release_upload(data, 0, cfg, seed, rnd, policy=policy, state_dir=str(tmp_path),
                                         client_seed=None)
            assert charged["charged"] == pytest.approx(8 * 2.5) and not charged["replayed"]
            rows.append(up.rows)
        released.append(np.concatenate(rows))
    ledger = Ledger(tmp_path, 0, policy.entries[0].scope)
    assert ledger.max_total() == pytest.approx(120.0)
    rep = mechanism_for(PublicSpec.of(cfg), 4).report()
    server = privacy_summary(rep, cfg.privacy, cfg.federation, cfg.train, data.users, 2, released,
                             3)["composition"]["per_user"]["max_epsilon_total"]
    assert server == pytest.approx(120.0) == ledger.max_total()


def test_a_repeated_request_gets_the_stored_answer_and_a_restarted_client_keeps_its_ledger(tmp_path):
    cfg = ExperimentConfig.from_flat(CLOSED)
    data, policy = _data(), ClientPolicy.from_points([cfg])
    first, c1 = release_upload(data, 0, cfg, 0, 0, policy=policy, state_dir=str(tmp_path), client_seed=None)
    again, c2 = release_upload(data, 0, cfg, 0, 0, policy=policy, state_dir=str(tmp_path), client_seed=None)
    np.testing.assert_array_equal(first.features, again.features)  # not fresh noise
    np.testing.assert_array_equal(first.labels, again.labels)
    assert c2["replayed"] == 1 and c2["charged"] == 0.0 and c2["ledger-max"] == c1["ledger-max"]
    # the old behaviour (no ledger) draws fresh noise for the same request: the replay above is the defence
    fresh = client_upload(data, 0, 0, 0, cfg)
    assert not np.array_equal(fresh.features, first.features)
    # a new Ledger object over the same directory (a restarted actor or SuperNode) reads the same totals
    ids, totals = Ledger(tmp_path, 0, policy.entries[0].scope).totals()
    assert ids.tolist() == [0] and totals.tolist() == pytest.approx([8 * 2.5])
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave no temporary file


def test_the_cap_keeps_each_release_within_every_users_budget_and_then_refuses(tmp_path):
    cfg = ExperimentConfig.from_flat({**CLOSED, "client.max-epsilon": 45.0})
    data, policy = _data(), ClientPolicy.from_points([cfg])
    kw: dict[str, Any] = {"policy": policy, "state_dir": str(tmp_path), "client_seed": None}
    full, _ = release_upload(data, 0, cfg, 0, 0, **kw)  # 8 records x 2.5 = 20
    release_upload(data, 0, cfg, 0, 1, **kw)  # 40
    # 5 left = 2 records at 2.5: the first two of this round's records leave, the other six are withheld
    part, charged = release_upload(data, 0, cfg, 0, 2, **kw)
    assert len(part.rows) == 2 and part.rows.tolist() == full.rows[:2].tolist()
    assert charged["withheld"] == 6 and charged["charged"] == pytest.approx(5.0)
    again, replay = release_upload(data, 0, cfg, 0, 2, **kw)  # a replay: the same two records, the same noise
    np.testing.assert_array_equal(again.features, part.features)
    assert replay["replayed"] == 1 and replay["withheld"] == 6
    with refused("budget exhausted", r"^every user in this release has spent its budget .*= 45"):
        release_upload(data, 0, cfg, 1, 0, **kw)
    assert Ledger(tmp_path, 0, policy.entries[0].scope).max_total() == pytest.approx(45.0)  # never past the cap


def test_within_budget_gives_each_user_its_first_records_up_to_its_room():
    users = np.array([3, 1, 3, 3, 1, 7])
    spent = {1: 0.0, 3: 1.0, 7: 2.0}
    keep = within_budget(users, lambda ids: np.array([spent[int(u)] for u in ids]), 1.0, 2.0)
    # user 3 has room for 1 record (its first), user 1 for 2 (both), user 7 for none
    assert keep.tolist() == [True, True, False, False, True, False]
    assert within_budget(users, lambda ids: np.zeros(len(ids)), math.inf, 10.0).tolist() == [False] * 6
    assert within_budget(users, lambda ids: np.zeros(len(ids)), 1.0, math.inf).all()


@pytest.mark.parametrize("change,needle", [
    ({"privacy.mechanism": "none"}, "privacy.mechanism"),
    ({"privacy.epsilon": 5.0}, "privacy.epsilon"),
    ({"privacy.label-epsilon": 0.0}, "privacy.label-epsilon"),
    ({"privacy.mechanism": "gaussian"}, "privacy.mechanism"),
    ({"federation.rounds": 30}, "federation.rounds"),
])
def test_requests_outside_the_policy_are_refused_with_one_line(tmp_path, change, needle):
    cfg = ExperimentConfig.from_flat(CLOSED)
    policy = ClientPolicy.from_points([cfg])
    with pytest.raises(Refused) as err:
        release_upload(_data(), 0, ExperimentConfig.from_flat(change, cfg), 0, 0, policy=policy,
                       state_dir=str(tmp_path), client_seed=None)
    assert str(err.value) == "refused: policy mismatch" and needle in err.value.detail  # the key: the client's own log
    for seed, rnd in ((2, 0), (0, 3)):  # another repetition or round than the policy's
        with pytest.raises(Refused):
            release_upload(_data(), 0, cfg, seed, rnd, policy=policy, state_dir=str(tmp_path), client_seed=None)


def test_the_policy_comes_from_the_node_config_or_the_environment_never_the_request(monkeypatch):
    cfg = ExperimentConfig.from_flat({"client.max-epsilon": 4.0, "privacy.epsilon": 2.0})
    monkeypatch.setenv(POLICY_ENV, ClientPolicy.from_points([cfg]).to_json())
    env = policy_from({})
    assert env.entries[0].client.max_epsilon == 4.0 and env.entries[0].client.on_device is True
    node = policy_from({"client.max-epsilon": 3, "privacy.epsilon": 1.0})  # a SuperNode: on-device off by default
    assert node.entries[0].client.max_epsilon == 3.0 and node.entries[0].client.on_device is False
    monkeypatch.delenv(POLICY_ENV)
    assert math.isinf(policy_from({}).entries[0].client.max_epsilon)
    assert json.loads(ClientPolicy.from_points([ExperimentConfig()]).to_json())[0]["client.max-epsilon"] == math.inf


def test_on_device_answers_need_the_opt_in_and_cover_all_test_users(tmp_path):
    cfg = ExperimentConfig.from_flat({**CLOSED, "client.min-count": 1})
    users = np.arange(8)
    data = _data(users=users)
    width = mechanism_for(PublicSpec.of(cfg), 4).output_dim or 4
    model = {"mean": np.zeros(width), "std": np.ones(width), "weight_0": np.zeros((2, width)),
             "bias_0": np.array([0.0, 1.0])}
    off = ClientPolicy.from_points([ExperimentConfig.from_flat({"client.on-device": False}, cfg)])
    with refused("on-device answers off", "client.on-device = false"):
        release_on_device(data, 0, cfg, 0, model, policy=off, state_dir=str(tmp_path), client_seed=None)
    policy = ClientPolicy.from_points([cfg])
    ans, charged = release_on_device(data, 0, cfg, 0, model, policy=policy, state_dir=str(tmp_path), client_seed=None)
    assert int(ans["n"][0]) == 8 and charged["charged"] == pytest.approx(1.0)
    bad = {**model, "weight_0": np.zeros((3, width)), "bias_0": np.zeros(3)}  # not the learner's shape
    with refused("malformed request", "shape"):
        release_on_device(data, 0, cfg, 1, bad, policy=policy, state_dir=str(tmp_path), client_seed=None)
    few = ClientPolicy.from_points([ExperimentConfig.from_flat({"client.min-count": 9}, cfg)])
    with refused("too few users", "fewer than its client.min-count"):
        release_on_device(data, 0, cfg, 0, model, policy=few, state_dir=str(tmp_path), client_seed=None)
