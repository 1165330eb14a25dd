"""One small registry of named components (learners, attacker families, extractors, secure-sum tasks), stdlib only.

Why lazy: the up-front checks (`fl_privtext.pipeline.preflight`, `fl_privtext.config`) must answer a misspelt name before
torch, Flower or Hugging Face ``datasets`` are imported (seconds at start-up; tests/test_errors_before_imports.py),
yet the components themselves need those. So a built-in entry is given as a ``"module:attr"`` string (``attr`` may be
dotted, ``Class.method``) and imported on first `Registry.get`; its NAME is known at once. A new component registers
itself with `Registry.register` (a decorator or a call) from whatever module defines it, a test file included::

    from fl_privtext.names import LEARNERS

    @LEARNERS.register("toy")
    def toy(inputs): ...

The registry is a live mapping, name -> component, in registration order (built-ins first, the order their errors
list them in): ``name in registry`` and ``list(registry)`` read names only; ``registry[name]`` and `get` import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar, overload

__all__ = ["Registry"]

T = TypeVar("T")
_REQUIRED: Any = object()  # `Registry.get` without a default: an unknown name is an error


class Registry(MutableMapping[str, T], Generic[T]):
    """Name -> component for one kind of component (``what``, e.g. ``"learner"``: its error messages' word).

    ``entries``: the built-ins, each a component or a lazy ``"module:attr"`` string. Item assignment replaces an
    entry (so ``monkeypatch.setitem`` works in tests); `register` refuses a name already taken."""

    def __init__(self, what: str, entries: Mapping[str, T | str] | None = None) -> None:
        self.what = what
        self._entries: dict[str, T | str] = dict(entries or {})

    # -- names: never import ----------------------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order (built-ins first)."""
        return tuple(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, names={self.names()!r})"

    def check(self, name: str) -> None:
        """Raise the registry's one-line ValueError unless ``name`` is registered (imports nothing)."""
        if name not in self._entries:
            raise ValueError(f"Unknown {self.what} {name!r}; valid names: {', '.join(self._entries)}.")

    # -- components: import on first use ----------------------------------------------------------------------
    def get(self, name: str, default: Any = _REQUIRED) -> T:  # type: ignore[override]
        """The component registered as ``name`` (imported on first use). An unknown name raises the one-line
        ValueError of `check`, unless a ``default`` is given (the Mapping form, which ``monkeypatch.setitem`` uses)."""
        if name not in self._entries and default is not _REQUIRED:
            return default  # type: ignore[no-any-return]
        self.check(name)
        return self[name]

    def __getitem__(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, sep, attr = entry.partition(":")
            if not sep:
                raise ValueError(f"{self.what} {name!r}: a lazy entry is 'module:attr'; got {entry!r}.")
            obj: object = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
            self._entries[name] = entry = obj  # type: ignore[assignment]
        return entry  # type: ignore[return-value]

    def __setitem__(self, name: str, component: T | str) -> None:
        self._entries[name] = component

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, component: T | str) -> T | str: ...

    def register(self, name: str, component: T | str | None = None) -> Callable[[T], T] | T | str:
        """Add ``component`` (or a lazy ``"module:attr"``) as ``name``; without ``component``, a decorator. A name
        already registered is refused (``del registry[name]`` first to replace one on purpose)."""
        if not name or not isinstance(name, str):
            raise ValueError(f"a {self.what} name must be a non-empty string; got {name!r}.")
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is already registered; registered names: "
                             f"{', '.join(self._entries)}.")
        if component is not None:
            self._entries[name] = component
            return component

        def decorate(obj: T) -> T:
            self.register(name, obj)
            return obj

        return decorate
