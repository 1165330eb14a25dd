"""User-level roles: train users, test users, and attacker-auxiliary users (whose attributes the attacker knows).

Two ways to assign them (``data.split``): ``random`` (`assign_roles`: fractions of users drawn from the run seed) and
``source`` (`source_roles`: the dataset's own train/dev/test files, the papers' protocol).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from fl_privtext.data.schema import TextDataset
from fl_privtext.names import (
    SPLITS,  # data.split's choices: how users get their roles (one list, read by the config too)
)
from fl_privtext.rng import generator

__all__ = ["ROLES", "SPLITS", "Roles", "assign_role_codes", "assign_roles", "seed_generator", "source_roles", "user_index"]

ROLES = ("train", "test", "aux")


class Roles(Sequence[str]):
    """(N,) per-record roles, one byte each: the index into `ROLES` of a "<U5" array's names, which it stands for
    where a prepared point holds them through a run (`fl_privtext.pipeline.prepare`; the strings took 20 bytes a
    record in the driver: ~0.7 GB at 10M synthetic users, issue #38). It answers as that array does for what the
    platform asks of roles: ``roles == "test"`` / ``!=`` (bool arrays), ``roles[rows]`` (Roles), ``roles[i]`` (the
    name), ``"train" in roles``, ``len``, iteration, and ``np.asarray(roles)`` (the "<U5" names); anything else
    fails rather than answering for the codes."""

    __slots__ = ("codes",)
    _NAMES = np.asarray(ROLES, "<U5")

    def __init__(self, codes: np.ndarray) -> None:
        self.codes = np.asarray(codes, np.int8)

    @classmethod
    def of(cls, names: np.ndarray | Sequence[str]) -> Roles:
        """The roles ``names`` (each one of `ROLES`) in one byte each; an unknown name is a ValueError."""
        names = np.asarray(names)
        codes = np.full(names.shape, -1, np.int8)
        for i, role in enumerate(ROLES):
            codes[names == role] = i
        if (codes < 0).any():
            bad = names[codes < 0][0]
            raise ValueError(f"A role must be one of {list(ROLES)}; got {str(bad)!r}.")
        return cls(codes)

    def _is(self, role: object) -> np.ndarray:
        return self.codes == ROLES.index(role) if role in ROLES else np.zeros(self.codes.shape, bool)

    def __eq__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return self._is(other) if isinstance(other, str) else np.asarray(self) == other

    def __ne__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return ~self._is(other) if isinstance(other, str) else np.asarray(self) != other

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        if isinstance(index, (int, np.integer)):
            return str(self._NAMES[self.codes[index]])
        return Roles(self.codes[index])

    def __len__(self) -> int:
        return len(self.codes)

    def __contains__(self, role: object) -> bool:
        return bool(self._is(role).any())

    def __iter__(self) -> Iterator[str]:
        return iter(np.asarray(self).tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        names = self._NAMES[self.codes]
        return names if dtype is None else names.astype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.codes.shape

    def setflags(self, *, write: bool) -> None:
        self.codes.setflags(write=write)

    def __repr__(self) -> str:
        return f"Roles({np.asarray(self)!r})"


def seed_generator(seed: int | np.random.Generator, *keys: object) -> np.random.Generator:
    """An int root seed -> the stream named by `keys` (fl_privtext.rng); a Generator is used as given."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (bool, float)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer or a numpy.random.Generator, got {seed!r}.")
    return generator(int(seed), *keys)


def user_index(ds: TextDataset | Sequence[str] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique user ids, per-row index into them) for a dataset or an array of per-row user ids."""
    if isinstance(ds, TextDataset):  # the dataset's cached index: no second sort of millions of strings
        return ds.user_names(), ds.user_index
    users = np.asarray(ds, dtype=str)
    if users.ndim != 1:
        raise ValueError(f"user ids must be a 1-D array, got shape {users.shape}.")
    uniq, inv = np.unique(users, return_inverse=True)
    return uniq, inv.reshape(-1)


def assign_roles(
    ds: TextDataset | Sequence[str] | np.ndarray,
    *,
    test_frac: float = 0.2,
    aux_frac: float = 0.2,
    seed: int | np.random.Generator,
) -> np.ndarray:
    """Per-row role in {"train", "test", "aux"}, drawn BY USER: every row of a user shares its user's role.

    `test_frac` and `aux_frac` are fractions of USERS (rounded; each role gets at least one user), each in (0, 1) with
    sum < 1; the rest are train users. Rows follow their users, so row fractions match only approximately when users
    have different numbers of rows. Seeded: the same seed and users give the same roles (users are sorted first, so the
    row order does not matter).
    """
    return np.asarray(assign_role_codes(ds, test_frac=test_frac, aux_frac=aux_frac, seed=seed))


def assign_role_codes(
    ds: TextDataset | Sequence[str] | np.ndarray,
    *,
    test_frac: float = 0.2,
    aux_frac: float = 0.2,
    seed: int | np.random.Generator,
) -> Roles:
    """`assign_roles` in one byte a record (`Roles`): the same draw, gathered per record as the index into `ROLES`
    instead of a "<U5" name (20 bytes a record, then compared three times to make the codes: the largest
    temporary of a run's validation at 10M synthetic users, issue #38)."""
    for what, frac in (("test_frac", test_frac), ("aux_frac", aux_frac)):
        if (
            isinstance(frac, bool)
            or not isinstance(frac, (int, float, np.floating))
            or not 0.0 < float(frac) < 1.0
        ):
            raise ValueError(f"{what} must be a number strictly between 0 and 1, got {frac!r}.")
    if float(test_frac) + float(aux_frac) >= 1.0:
        raise ValueError(
            f"test_frac + aux_frac must be < 1 so that some users train; got {test_frac} + {aux_frac} = "
            f"{float(test_frac) + float(aux_frac):g}."
        )
    if isinstance(ds, TextDataset):  # only the count is needed: no string per user
        inv, num_users = ds.user_index, ds.num_users
    else:
        uniq, inv = user_index(ds)
        num_users = len(uniq)
    n_test = max(1, round(float(test_frac) * num_users))
    n_aux = max(1, round(float(aux_frac) * num_users))
    if num_users - n_test - n_aux < 1:
        raise ValueError(
            f"Cannot split {num_users} user(s) into train/test/aux with test_frac={test_frac} and aux_frac={aux_frac}: "
            "each role needs at least one user."
        )
    rng = seed_generator(seed, "data", "assign_roles")
    order = rng.permutation(num_users)  # users in random order: first test, then aux, then train
    role_of_user = np.empty(num_users, dtype=np.int8)  # the index into ROLES
    role_of_user[order[:n_test]] = ROLES.index("test")
    role_of_user[order[n_test : n_test + n_aux]] = ROLES.index("aux")
    role_of_user[order[n_test + n_aux :]] = ROLES.index("train")
    return Roles(role_of_user[inv])


def source_roles(ds: TextDataset) -> np.ndarray:
    """Per-row role from the dataset's own splits (``data.split = source``): the source's test rows are the "test"
    users; the source's train and dev rows are "aux" users.

    This is the protocol of the reproduced papers (DPNR, Coavoux et al., CAPE): the task model is trained on the
    training data (here train + dev: the server does no dev-set model selection) and evaluated on the test file, and the
    attacker is trained on the representations of the training data with their private attributes and attacks the
    test file's. In the platform's roles that is: every non-test user trains the server AND is known to the attacker
    ("aux"), the attacker's targets are exactly the test users, and no user is "train" (unknown to the attacker but
    training the server). Deterministic: the run seed does not change the roles; `data.test-frac` and
    `data.aux-frac` are not used.

    Users stay intact: a user whose rows lie in different source splits raises ValueError, as does a dataset without
    source splits (every row "all") or without a test split.
    """
    split = ds.source_split
    present = sorted(set(split.tolist()))
    if "all" in present:
        raise ValueError(
            f"Dataset {ds.name!r} has no source train/dev/test splits (its rows are marked 'all'), so data.split = "
            "'source' cannot be used; use data.split = 'random', or a dataset whose files carry splits "
            "(ag_news, snips, mrpc, trustpilot_us, or a csv whose data.options.split names its split column)."
        )
    unknown = [s for s in present if s not in ("train", "dev", "test")]
    if unknown or "test" not in present or present == ["test"]:
        raise ValueError(
            f"data.split = 'source' needs source splits among train, dev and test, with a test split and a train or "
            f"dev split; dataset {ds.name!r} has {present}."
        )
    uniq, inv = user_index(ds)
    test_row = split == "test"
    tests_per_user = np.bincount(inv, weights=test_row, minlength=len(uniq))
    rows_per_user = np.bincount(inv, minlength=len(uniq))
    mixed = np.flatnonzero((tests_per_user > 0) & (tests_per_user < rows_per_user))
    if mixed.size:
        raise ValueError(
            f"data.split = 'source' keeps users intact, but {mixed.size} user(s) of dataset {ds.name!r} have rows in "
            f"the source test split and in train/dev (e.g. {str(uniq[mixed[0]])!r}); use data.split = 'random'."
        )
    return np.where(test_row, "test", "aux").astype("<U5")
