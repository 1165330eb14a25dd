"""Per-user privacy accounting over several releases (uploads, rounds): basic composition.

Pure epsilon adds over every release of the same user's data (Dwork & Roth 2014, Theorem 3.16); delta adds too
(basic composition). Both the nominal (published) and the worst-case epsilon are tracked; the worst case is the
guarantee. Vectorised over numpy arrays of user ids (all ints or all strings; ids of one kind per accountant).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from fl_privtext.privacy.report import PrivacyReport, json_number

Kind = Literal["worst_case", "nominal"]
KINDS: tuple[str, ...] = ("worst_case", "nominal")


def _id_kind(ids: np.ndarray) -> str:
    if ids.dtype.kind in "iu":
        return "int"
    if ids.dtype.kind in "US":
        return "str"
    if ids.dtype.kind == "O" and all(isinstance(v, str) for v in ids.tolist()):
        return "str"
    raise ValueError(f"user ids must be integers or strings, got dtype {ids.dtype}.")


class Accountant:
    """Running per-user totals: releases, epsilon_nominal, epsilon_worst_case, delta."""

    def __init__(self) -> None:
        self._ids: np.ndarray = np.array([], dtype=np.int64)  # sorted unique ids
        self._kind: str | None = None
        self._releases = np.zeros(0, dtype=np.int64)
        self._eps = {k: np.zeros(0, dtype=np.float64) for k in KINDS}
        self._delta = np.zeros(0, dtype=np.float64)
        self._history: list[dict[str, Any]] = []

    def _normalise_ids(self, user_ids: Any) -> np.ndarray:
        ids = np.atleast_1d(np.asarray(user_ids))
        if ids.ndim != 1:
            raise ValueError(f"user_ids must be a scalar or a 1-D array, got shape {ids.shape}.")
        if ids.size == 0:
            return ids
        kind = _id_kind(ids)
        if self._kind is not None and kind != self._kind:
            names = {"int": "integer", "str": "string"}
            raise ValueError(f"This accountant holds {names[self._kind]} user ids; got {names[kind]} ids "
                             "(use one kind of id per accountant).")
        self._kind = kind
        return ids.astype(np.int64) if kind == "int" else ids.astype(str)

    def charge(self, user_ids: Any, report: PrivacyReport, times: int = 1) -> None:
        """Charge ``times`` releases described by ``report`` to every id in ``user_ids`` (repeats count again)."""
        if isinstance(times, bool) or not isinstance(times, (int, np.integer)) or times < 1:
            raise ValueError(f"times must be an integer >= 1, got {times!r}.")
        ids = self._normalise_ids(user_ids)
        if ids.size == 0:
            return
        uniq, counts = np.unique(ids, return_counts=True)
        if self._ids.size == 0:
            merged = uniq
        else:
            merged = np.union1d(self._ids, uniq)
        if merged.size != self._ids.size:
            old = np.searchsorted(merged, self._ids)
            self._releases = _grow(self._releases, old, merged.size)
            self._eps = {k: _grow(v, old, merged.size) for k, v in self._eps.items()}
            self._delta = _grow(self._delta, old, merged.size)
            self._ids = merged
        idx = np.searchsorted(self._ids, uniq)
        n = counts * int(times)
        self._releases[idx] += n
        with np.errstate(invalid="ignore"):  # inf * 0 cannot happen (n >= 1); inf + inf = inf
            self._eps["worst_case"][idx] += n * report.epsilon_worst_case
            self._eps["nominal"][idx] += n * report.epsilon_nominal
        self._delta[idx] += n * report.delta
        self._history.append({"mechanism": report.mechanism, "users": int(uniq.size), "releases": int(n.sum()),
                              "epsilon_worst_case": json_number(report.epsilon_worst_case),
                              "epsilon_nominal": json_number(report.epsilon_nominal), "delta": report.delta})

    def _index(self, user_id: Any) -> int | None:
        if self._ids.size == 0:
            return None
        key = np.asarray(self._normalise_probe(user_id))
        i = int(np.searchsorted(self._ids, key))
        return i if i < self._ids.size and self._ids[i] == key else None

    def _normalise_probe(self, user_id: Any) -> Any:
        if self._kind == "int":
            if isinstance(user_id, (int, np.integer)) and not isinstance(user_id, bool):
                return int(user_id)
            raise ValueError(f"This accountant holds integer user ids; got {user_id!r}.")
        if not isinstance(user_id, (str, np.str_)):
            raise ValueError(f"This accountant holds string user ids; got {user_id!r}.")  # noqa: TRY004
        return str(user_id)

    def epsilon_of(self, user_id: Any, kind: Kind = "worst_case") -> float:
        """Total epsilon charged to one user (0.0 if never charged)."""
        _check_kind(kind)
        i = self._index(user_id)
        return 0.0 if i is None else float(self._eps[kind][i])

    def epsilon(self, user_id: Any, kind: Kind = "worst_case") -> float:
        """Alias of :meth:`epsilon_of` (docs/design.md name)."""
        return self.epsilon_of(user_id, kind)

    def delta_of(self, user_id: Any) -> float:
        """Total delta charged to one user."""
        i = self._index(user_id)
        return 0.0 if i is None else float(self._delta[i])

    def releases_of(self, user_id: Any) -> int:
        """Number of releases charged to one user."""
        i = self._index(user_id)
        return 0 if i is None else int(self._releases[i])

    def epsilons(self, kind: Kind = "worst_case") -> tuple[np.ndarray, np.ndarray]:
        """(user ids, totals), both (U,), sorted by id."""
        _check_kind(kind)
        return self._ids.copy(), self._eps[kind].copy()

    def max_epsilon(self, kind: Kind = "worst_case") -> float:
        """Largest per-user total (0.0 when nobody was charged)."""
        _check_kind(kind)
        return float(self._eps[kind].max()) if self._ids.size else 0.0

    def max_delta(self) -> float:
        """Largest per-user delta total."""
        return float(self._delta.max()) if self._ids.size else 0.0

    def to_json(self, *, per_user: bool = True) -> dict[str, Any]:
        """JSON-safe summary (inf as "inf"), optionally with every user's totals."""
        out: dict[str, Any] = {
            "composition": "basic: epsilon and delta add over every release of the same user",
            "users": int(self._ids.size),
            "releases": int(self._releases.sum()),
            "max_epsilon": json_number(self.max_epsilon("worst_case")),  # the guarantee (worst case)
            "max_epsilon_worst_case": json_number(self.max_epsilon("worst_case")),
            "max_epsilon_nominal": json_number(self.max_epsilon("nominal")),
            "max_delta": self.max_delta(),
            "charges": list(self._history),
        }
        if per_user:
            out["per_user"] = {
                str(uid): {"releases": int(r), "epsilon_worst_case": json_number(w),
                           "epsilon_nominal": json_number(n), "delta": float(d)}
                for uid, r, w, n, d in zip(self._ids.tolist(), self._releases, self._eps["worst_case"],
                                           self._eps["nominal"], self._delta, strict=True)
            }
        return out


def _grow(values: np.ndarray, old_positions: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=values.dtype)
    out[old_positions] = values
    return out


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}.")
