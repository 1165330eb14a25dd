"""The shuffler strips the sender and unlinks record ids: a per-user linkage attack on what the server sees falls to
its baseline (a known-bad shuffler that keeps the record ids does not)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from fl_privtext.federation.shuffler import SHUFFLER_NODE_ID, ShufflingGrid, shuffle_reports

NODES, PER_NODE, DIM = 4, 250, 3


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages are made outside a Flower run here: give them the identity a run would (as test_inflight does)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1 if name != "_node_id" else 0)


def _parts(rnd: int) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(rnd)
    return {node: {"features": rng.normal(size=(PER_NODE, DIM)).astype(np.float32),
                   "labels": rng.integers(0, 2, PER_NODE),
                   "rows": np.arange(node * PER_NODE, (node + 1) * PER_NODE, dtype=np.int64)}
            for node in range(1, NODES + 1)}


def _reply(node: int, part: dict[str, np.ndarray]) -> Message:
    content = RecordDict({"upload": ArrayRecord({k: Array(v) for k, v in part.items()}),
                          "stats": MetricRecord({"input_dim": DIM})})
    msg = Message(content, dst_node_id=1, message_type="query.upload")
    msg.metadata.__dict__["_src_node_id"] = node  # as a client's reply arrives
    return msg


def _sender_attack(seen: list[Message], truth: dict[bytes, int]) -> float:
    """Accuracy of the server's per-report sender guess: the message's sender where it has one, else the owner of
    the record id (the server knows which records each node holds)."""
    hits = total = 0
    for m in seen:
        up = m.content.array_records["upload"]
        for f, r in zip(up["features"].numpy(), up["rows"].numpy(), strict=True):
            guess = int(m.metadata.src_node_id) or int(r) // PER_NODE  # node k holds rows [k, k+1) * PER_NODE
            hits += guess == truth[f.tobytes()]
            total += 1
    return hits / total


def _truth(parts: dict[int, dict[str, np.ndarray]]) -> dict[bytes, int]:
    return {f.tobytes(): node for node, p in parts.items() for f in p["features"]}


def test_shuffled_output_has_no_sender_and_the_sender_attack_falls_to_baseline() -> None:
    parts = _parts(0)
    replies = [_reply(n, p) for n, p in parts.items()]
    assert _sender_attack(replies, _truth(parts)) == 1.0  # without the shuffler: every report attributed
    seen = ShufflingGrid(None, np.random.default_rng(1)).shuffle(replies)  # type: ignore[arg-type]
    assert len(seen) == 1 and seen[0].metadata.src_node_id == SHUFFLER_NODE_ID
    acc = _sender_attack(seen, _truth(parts))
    # no better than the baseline 1/NODES (guessing); 1000 reports: 4 standard deviations of a Bin(1000, 1/4)
    # share is 0.055 (pseudonyms past the last node's ids are guessed as node 0, so this guesser sits below 1/4)
    assert acc < 1 / NODES + 0.055
    # every report arrives, once, with its label
    up = seen[0].content.array_records["upload"]
    got = sorted(zip(map(bytes, up["features"].numpy()), up["labels"].numpy(), strict=True))
    want = sorted((f.tobytes(), y) for p in parts.values() for f, y in zip(p["features"], p["labels"], strict=True))
    assert got == want


def test_known_bad_shuffler_that_keeps_record_ids_is_caught() -> None:
    parts = _parts(0)
    mixed = shuffle_reports(list(parts.values()), np.random.default_rng(2))
    order = [np.flatnonzero((np.concatenate([p["features"] for p in parts.values()]) == f).all(1))[0]
             for f in mixed["features"]]
    leaky = dict(mixed, rows=np.concatenate([p["rows"] for p in parts.values()])[order])  # ids kept: bad
    msg = _reply(SHUFFLER_NODE_ID, leaky)
    assert _sender_attack([msg], _truth(parts)) == 1.0


def test_pseudonyms_do_not_link_a_users_reports_across_rounds() -> None:
    grid = ShufflingGrid(None, np.random.default_rng(3))  # type: ignore[arg-type]
    p1, p2 = _parts(1), _parts(2)  # the same users (row ids) report in two rounds
    s1 = grid.shuffle([_reply(n, p) for n, p in p1.items()])[0].content.array_records["upload"]
    s2 = grid.shuffle([_reply(n, p) for n, p in p2.items()])[0].content.array_records["upload"]
    ps1, ps2 = s1["rows"].numpy(), s2["rows"].numpy()
    # fresh pseudonyms: never reused, so equal pseudonyms link nothing across rounds (nor within one)
    assert len(np.unique(np.concatenate([ps1, ps2]))) == len(ps1) + len(ps2)
    assert grid.rounds_shuffled == 2
    # the referee's key maps each pseudonym back to the record that produced the report (and only the referee's)
    user1 = {f.tobytes(): int(r) for p in p1.values() for f, r in zip(p["features"], p["rows"], strict=True)}
    assert [user1[f.tobytes()] for f in s1["features"].numpy()] == grid.reveal(ps1).tolist()
    # and the order carries nothing either: the pseudonym order is independent of the record order
    assert abs(stats_corr(ps1, grid.reveal(ps1))) < 0.15


def stats_corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.astype(float), b.astype(float))[0, 1])


def test_cohorts_are_shuffled_separately_and_only_aux_keeps_record_ids() -> None:
    parts = _parts(4)
    n_rec = NODES * PER_NODE + PER_NODE
    roles = np.array(["train", "test", "aux"])[np.arange(n_rec) % 3]  # a public split of the records
    grid = ShufflingGrid(None, np.random.default_rng(5), cohorts=roles, first_pseudonym=n_rec)  # type: ignore[arg-type]
    seen = grid.shuffle([_reply(n, p) for n, p in parts.items()])
    assert sorted(m.content.config_records["cohort"]["name"] for m in seen) == ["aux", "test", "train"]
    for m in seen:
        assert m.metadata.src_node_id == SHUFFLER_NODE_ID
        assert set(m.content.array_records["shuffle"]["contributors"].numpy().tolist()) == set(parts)
        ids = m.content.array_records["upload"]["rows"].numpy()
        rec = grid.reveal(ids)
        name = m.content.config_records["cohort"]["name"]
        assert (roles[rec] == name).all()  # every report in its own cohort's message
        if name == "aux":
            assert (ids == rec).all()  # the colluders' reports keep their record ids
        else:
            assert (ids >= n_rec).all()  # pseudonyms: never a record id
    assert grid.sent_by.keys() == parts.keys()
    with pytest.raises(ValueError, match="first_pseudonym"):
        ShufflingGrid(None, cohorts=roles, first_pseudonym=10)  # type: ignore[arg-type]


def test_reports_without_the_upload_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="upload must hold"):
        shuffle_reports([{"rows": np.arange(3)}], np.random.default_rng(0))


def test_server_needs_the_shuffler_below_its_grid() -> None:
    import dataclasses

    from fl_privtext.config import ExperimentConfig
    from fl_privtext.federation.server_app import transport

    cfg = ExperimentConfig()
    cfg = dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, shuffle=True))
    with pytest.raises(ValueError, match="federation.shuffle"):
        transport(None, cfg)  # type: ignore[arg-type]


def test_the_plain_loop_refuses_shuffle() -> None:
    import dataclasses

    from fl_privtext import pipeline
    from fl_privtext.config import ExperimentConfig

    cfg = ExperimentConfig()
    cfg = dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, shuffle=True))
    with pytest.raises(ValueError, match="federation.shuffle"):
        pipeline.run_plain(cfg)
