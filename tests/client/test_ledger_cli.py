"""`fl-privtext ledger DIR [--json]`: the clients' per-user totals over every policy entry, and their refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fl_privtext.cli import main
from fl_privtext.client import Ledger, Refused
from fl_privtext.client.ledger import log_refusal


def _release(ledger: Ledger, key: str, users: list[int], eps: float, cap: float = math.inf) -> None:
    ledger.release(key, cap, lambda _spent: ({"x": np.zeros(1)}, np.array(users), eps))


def test_json_gives_users_the_largest_total_over_every_entry_and_the_refusals(tmp_path, capsys):
    # node 0: users 1, 2 under two policy entries (a cap changed between runs): user 1's total is the sum
    _release(Ledger(tmp_path, 0, "entry-a"), "k1", [1, 2], 3.0)
    _release(Ledger(tmp_path, 0, "entry-b"), "k1", [1], 4.0)
    _release(Ledger(tmp_path, 1, "entry-a"), "k1", [7], 2.5)
    with pytest.raises(Refused):  # 7 + 4 > 10: refused, charged nothing
        _release(Ledger(tmp_path, 0, "entry-b"), "k2", [1], 4.0, cap=10.0)
    log_refusal(tmp_path, 0, "query.upload", Refused("budget exhausted", "user 1 would reach 11"))
    assert main(["ledger", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["users"] == 3 and out["max_epsilon_charged"] == pytest.approx(7.0)
    assert [(r["reason"], r["node"]) for r in out["refusals"]] == [("budget exhausted", 0)]
    assert {n["node"]: n["max_epsilon_charged"] for n in out["nodes"]} == pytest.approx({0: 7.0, 1: 2.5})


def test_an_infinite_total_is_the_string_inf_and_a_missing_dir_is_a_one_line_error(tmp_path, capsys):
    _release(Ledger(tmp_path, 0, "entry"), "k", [5], math.inf)  # a label in the clear
    assert main(["ledger", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_epsilon_charged"] == "inf"
    assert main(["ledger", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a clients' state directory" in err
