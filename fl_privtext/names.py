"""The registries of named components, and the names of those that stay elsewhere, readable without importing them
(stdlib only).

The components need torch, Flower or Hugging Face ``datasets`` (seconds at start-up); the up-front checks
(`fl_privtext.pipeline.preflight`, `fl_privtext.config`) read only names, so a misspelt name is reported before any of that is
imported. The registries (`Registry`, below) give each built-in as a lazy ``"module:attr"`` and import
it on first use; the owners read the same object (``fl_privtext.server.learners.LEARNERS is LEARNERS``), so the
config's choice lists, the owners' dispatch and the report cannot drift. Adding a component is its own file plus
one ``register`` call (or one line here, for a built-in). The datasets' lists stand in for the registry of
`fl_privtext.data`; tests/test_errors_before_imports.py checks them against it.

`Registry` is the one registry class (learners, attacker families, extractors, mechanisms, secure-sum tasks).

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

__all__ = [
    "ATTACKS",
    "ATTACK_FAMILIES",
    "DATASETS",
    "DATASET_FILES",
    "DATASET_OPTIONS",
    "EXTRACTORS",
    "LEARNERS",
    "MECHANISMS",
    "PRECISIONS",
    "RECORDS_PER_USER",
    "SAMPLERS",
    "SECAGG_TASKS",
    "SPLITS",
    "Registry",
]

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


# privacy.mechanism: the mechanism class (fl_privtext.privacy.mechanisms.make_mechanism), in the order its error
# messages list them in; each built-in by its name in the mechanisms package (robust to moves inside it)
# extractor.precision: the transformer extractors' compute precision (fl_privtext.extract.transformer)
PRECISIONS = ("float32", "bf16", "fp16")

# data.split: how users get their roles (fl_privtext.data.splits)
SPLITS = ("random", "source")

# privacy.sampler: how a mechanism draws its noise (fl_privtext.privacy.mechanisms.base: "secure" is exact)
SAMPLERS = ("float", "secure")

MECHANISMS: Registry[Any] = Registry("mechanism", {
    name: f"fl_privtext.privacy.mechanisms:{cls}"
    for name, cls in (("none", "NoPrivacy"), ("ome", "OME"), ("sue", "SUE"), ("oue", "OUE"), ("bitrr", "BitRR"),
                      ("laplace-dpnr", "LaplaceDPNR"), ("laplace-dpnr-code", "LaplaceDPNRCode"),
                      ("laplace-l1", "LaplaceL1"), ("laplace-box", "LaplaceBox"), ("gaussian", "Gaussian"),
                      ("privunitg", "PrivUnitG"), ("privunit", "PrivUnit"), ("duchi", "Duchi"),
                      ("mvlaplace", "MultivariateLaplace"), ("purkayastha", "Purkayastha"))
})

# extractor.name: the extractor class, called with its keyword options (fl_privtext.extract.make_extractor)
EXTRACTORS: Registry[Any] = Registry("extractor", {
    "glove": "fl_privtext.extract.glove:GloveExtractor",
    "minilm": "fl_privtext.extract.transformer:MiniLMExtractor",
    "hf": "fl_privtext.extract.transformer:HFExtractor",
})

# server.learner / attack.learner (besides "auto"): a factory LearnerInputs -> Learner
# (fl_privtext.server.learners.make_learner; "constant" is auto's null, not a choice)
LEARNERS: Registry[Any] = Registry("learner", {
    "mlp": "fl_privtext.server.learners:MLP.build",
    "linear": "fl_privtext.server.learners:Linear.build",
    "lda": "fl_privtext.server.learners:LDA.build",
    "centroid": "fl_privtext.server.learners:Centroid.build",
})

# attack.families: the eavesdropper's attribute-inference families, each fit(problem, train, rows, key) -> the
# per-upload log posteriors of ``rows`` (fl_privtext.attacks.attribute; the server's learners join them by name;
# the built-ins also fit once and score in chunks: attribute.FITS)
ATTACK_FAMILIES: Registry[Any] = Registry("attacker family", {
    "mlp": "fl_privtext.attacks.attribute:mlp_family",
    "logistic": "fl_privtext.attacks.attribute:logistic_family",
    "likelihood": "fl_privtext.attacks.attribute:likelihood_family",
})

# attack.extra: the eavesdropper's attacks on the whole traffic, each run(view, truth) -> {results.json
# attacks_extra key: its result} (fl_privtext.attacks.evaluate.run_attacks; fl_privtext.report prints them)
ATTACKS: Registry[Any] = Registry("attack", {
    "linkage": "fl_privtext.attacks.evaluate:linkage_attacks",
    "inversion": "fl_privtext.attacks.evaluate:inversion_attack",
})

# a secure-sum request's task (client side): vector(msg, context) -> the client's clipped, noised float vector
# (fl_privtext.federation.secagg); importing the client app registers nothing, the name resolves here
SECAGG_TASKS: Registry[Any] = Registry("secure-sum task", {
    "phase-a": "fl_privtext.federation.secagg_train:phase_a_vector",
    "phase-b-stats": "fl_privtext.federation.secagg_stats:stats_vector",
})

_COLUMN_OPTIONS = ("path", "text", "text_pair", "label", "label_type", "label_names", "attributes",
                   "multilabel_attributes", "attribute_classes", "multilabel_sep", "user", "split")

# = fl_privtext.data.DATASETS and fl_privtext.data.dataset_options(name): the options each loader accepts, in order
DATASET_OPTIONS: dict[str, tuple[str, ...]] = {
    "default": (),
    "blog": ("label", "min_topic_prob", "age_groups", "max_rows", "seed", "user_per_record"),
    "ag_news": (),
    "trustpilot_us": ("drop_empty",),
    "trustpilot_dk": (),
    "imdb": (),
    "amazon": (),
    "yelp": (),
    "snips": (),
    "mrpc": (),
    "csv": (*_COLUMN_OPTIONS, "format", "delimiter", "quoting", "encoding", "header", "name"),
    "hf": (*_COLUMN_OPTIONS, "name"),
    "synthetic": ("users", "seed"),
}
DATASETS = tuple(DATASET_OPTIONS)

# any dataset: each user's first k records only (fl_privtext.pipeline.preparation.first_records), not a loader option
RECORDS_PER_USER = "records_per_user"

# The files each staged dataset's loader reads under the data root (fl_privtext.data.loaders; the loader's own
# DataNotFoundError lists the same paths). Datasets not listed read no fixed file: default and synthetic need no
# data root, csv and hf read their ``path`` option.
DATASET_FILES: dict[str, tuple[str, ...]] = {
    "blog": ("blog_authorship/blog_posts_balanced_60k.tsv.gz",),
    "ag_news": ("ag_news_entities/ag_data.txt",),
    "trustpilot_us": ("trustpilot/lip_trustpilot_english_train.csv", "trustpilot/lip_trustpilot_english_test.csv"),
    "trustpilot_dk": ("trustpilot/dmvmt_trustpilot_denmark_english.csv",),
    "imdb": ("sentiment_sentences_kotzias/imdb_labelled.txt",),
    "amazon": ("sentiment_sentences_kotzias/amazon_cells_labelled.txt",),
    "yelp": ("sentiment_sentences_kotzias/yelp_labelled.txt",),
    "snips": tuple(f"snips_intents/{d}/{f}" for d in ("train", "valid", "test") for f in ("seq.in", "label", "seq.out")),
    "mrpc": ("mrpc/msr_paraphrase_train.txt", "mrpc/msr_paraphrase_test.txt"),
}

