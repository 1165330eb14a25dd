"""The names the registries accept, readable without importing them (stdlib only).

The registries themselves live next to their implementations and import what those need (`fl_privtext.data.DATASETS`
loads Hugging Face ``datasets``, `fl_privtext.extract.EXTRACTORS` and `fl_privtext.server.learners` load torch): seconds
at start-up. The up-front checks (`fl_privtext.preflight`) read these lists instead, so a misspelt name is reported
before any of that is imported. tests/test_errors_before_imports.py checks every list against its registry, so they cannot drift.
"""

from __future__ import annotations

from typing import Any

from fl_privtext.config import EXTRACTOR_NAMES, LEARNER_CHOICES

__all__ = ["DATASETS", "DATASET_FILES", "DATASET_OPTIONS", "EXTRACTORS", "LEARNERS", "MECHANISMS",
           "RECORDS_PER_USER"]

# = fl_privtext.privacy.mechanisms.MECHANISMS, in its order (the order its error messages list them in)
MECHANISMS = ("none", "ome", "sue", "oue", "bitrr", "laplace-dpnr", "laplace-dpnr-code", "laplace-l1", "laplace-box",
              "gaussian", "privunitg", "privunit", "duchi", "mvlaplace", "purkayastha")

EXTRACTORS = EXTRACTOR_NAMES  # = fl_privtext.extract.EXTRACTORS
LEARNERS = tuple(n for n in LEARNER_CHOICES if n != "auto")  # = fl_privtext.server.learners.LEARNERS

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


def records_per_user(value: Any) -> int:
    """``data.options.records_per_user``: an integer >= 1 (also `fl_privtext.pipeline.preparation.first_records`)."""
    try:
        k = int(value)
    except (TypeError, ValueError):
        k = 0
    if k < 1 or str(value).strip() != str(k):
        raise ValueError(f"data.options.records_per_user must be an integer >= 1; got {value!r}.")
    return k
