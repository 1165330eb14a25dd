"""Points whose requests a client cannot tell apart (same privacy, rounds, seeds) but whose [client] policies differ
never share a simulation: the clients would answer both under the first entry (found by the trust-model page, where
central epsilon 1 was answered at 4)."""

from __future__ import annotations

import pytest

from fl_privtext.client.policy import ClientPolicy
from fl_privtext.config import ExperimentConfig
from fl_privtext.sweep import simulation_group


def _secagg(eps: float) -> ExperimentConfig:
    return ExperimentConfig.from_flat({"server.aggregate": "secagg", "privacy.mechanism": "none",
                                       "client.secagg-epsilon": eps})


def test_points_differing_only_in_the_client_policy_are_separate_simulations():
    a, b = _secagg(1.0), _secagg(4.0)
    assert simulation_group(a) != simulation_group(b)
    assert simulation_group(a) == simulation_group(_secagg(1.0))
    with pytest.raises(ValueError, match="differ only in their \\[client\\] policy"):
        ClientPolicy.from_points([a, b])


def test_points_the_requests_tell_apart_share_a_policy():
    a = ExperimentConfig.from_flat({"privacy.epsilon": 1.0})
    b = ExperimentConfig.from_flat({"privacy.epsilon": 2.0})
    policy = ClientPolicy.from_points([a, b])
    assert policy.entry_for(b).pinned["privacy.epsilon"] == 2.0
    assert simulation_group(a) == simulation_group(b)


def test_points_differing_only_in_the_server_learner_are_separate_simulations():
    # a client answers on-device evaluation once per point and seed, whatever model it is sent: two learners in one
    # simulation would both be reported with the first model's answer
    a = ExperimentConfig.from_flat({"server.learner": "centroid"})
    b = ExperimentConfig.from_flat({"server.learner": "lda"})
    assert simulation_group(a) != simulation_group(b)


def test_points_over_another_shard_are_separate_simulations_and_never_one_policy():
    # a client holds one set of users (issue #34 item 5): another partition or seed is another simulation
    a = ExperimentConfig.from_flat({"federation.partition": "iid"})
    b = ExperimentConfig.from_flat({"federation.partition": "dirichlet"})
    assert simulation_group(a) != simulation_group(b)
    with pytest.raises(ValueError, match="one shard"):
        ClientPolicy.from_points([a, b])


def test_a_policy_file_and_node_config_set_a_supernodes_policy(tmp_path):
    from fl_privtext.client.policy import Refused, policy_from

    path = tmp_path / "policy.toml"
    path.write_text('[privacy]\nepsilon = 2.0\nlabel-epsilon = 1.0\n[client]\nmax-epsilon = 40.0\n')
    policy = policy_from({"policy-file": str(path), "client.on-device": True, "partition-id": 0,
                          "num-partitions": 2})
    request = ExperimentConfig.from_flat({"privacy.epsilon": 2.0, "privacy.label-epsilon": 1.0,
                                          "federation.num-clients": 2})
    entry = policy.entry_for(request)
    assert entry.client.max_epsilon == 40.0 and entry.client.on_device
    with pytest.raises(Refused, match="^refused: shard mismatch$"):
        policy.entry_for(ExperimentConfig.from_flat({**request.to_flat(), "federation.partition": "dirichlet"}))
    path.write_text('[server]\nepochs = 3\n')
    with pytest.raises(ValueError, match="not the client's to set"):
        policy_from({"policy-file": str(path)})


def test_an_actor_parses_a_request_once_and_checks_it_against_its_policy_once(monkeypatch):
    """Every message rebuilt the request's config from its ~120 keys and read the policy for it two to four more
    times (~1.5 ms each: ~13% of the actors' handler samples, issue #38). The same keys now give the same frozen
    request object, the policy's answer for it is kept per request object, and nothing else changes: another
    request gets its own config, and a request the policy refuses is refused again every time it comes."""
    from types import SimpleNamespace

    from fl_privtext import config
    from fl_privtext.client.policy import Refused, checked_entry
    from fl_privtext.federation.client_data import request_config

    def message(cfg: ExperimentConfig) -> SimpleNamespace:
        flat = {k: v for k, v in cfg.to_flat().items() if not k.startswith("client.")}
        return SimpleNamespace(content=SimpleNamespace(config_records={"config": flat}))

    mine, other = ExperimentConfig.from_flat({"privacy.epsilon": 1.5}), ExperimentConfig.from_flat({"privacy.epsilon": 3.0})
    policy = ClientPolicy.from_points([mine])
    first = request_config(message(mine))
    assert request_config(message(mine)) is first and first == ExperimentConfig.from_flat(message(mine).content.config_records["config"])
    assert request_config(message(other)).privacy.epsilon == 3.0
    entry, cfg = checked_entry(policy, first, mine.run.seed)
    built: list[int] = []
    from_flat = config.ExperimentConfig.from_flat.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(config.ExperimentConfig, "from_flat",
                        classmethod(lambda cls, *a, **k: (built.append(1), from_flat(cls, *a, **k))[1]))
    again = request_config(message(mine))
    assert checked_entry(policy, again, mine.run.seed) == (entry, cfg) and policy.shard_of(again) is policy.shard_of(first)
    assert built == []  # neither the request nor the policy's view of it was rebuilt
    for _ in range(2):
        with pytest.raises(Refused, match="policy mismatch"):
            checked_entry(policy, request_config(message(other)), other.run.seed)
    with pytest.raises(Refused, match="out of range"):  # the repetition seed is checked on every request
        checked_entry(policy, again, mine.run.seed + mine.run.seeds)
