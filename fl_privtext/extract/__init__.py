"""Frozen text feature extractors and their on-disk embedding cache.

Contract: docs/design.md (fl_privtext.extract) and docs/extractors.md.

ext = make_extractor("glove" | "minilm" | "hf", model=None, pooling="mean", max_length=128, batch_size=None,
                     precision="float32")
X = ext.extract(texts, text_pairs=None, progress=True)      # (N, ext.dim) float32
feats = extract_cached(ds, ext, cache_dir)                  # read-only memmap (N, dim), dataset row order
"""

from fl_privtext.extract.base import Extractor, make_extractor, make_extractor_from
from fl_privtext.extract.cache import EmbeddingCache, extract_cached, file_sha256, resolve_cache_dir
from fl_privtext.extract.glove import GloveExtractor, GloveStats, normalize_text, tokenize
from fl_privtext.extract.transformer import HFExtractor, MiniLMExtractor
from fl_privtext.names import EXTRACTORS

__all__ = [
    "EXTRACTORS",
    "EmbeddingCache",
    "Extractor",
    "GloveExtractor",
    "GloveStats",
    "HFExtractor",
    "MiniLMExtractor",
    "extract_cached",
    "file_sha256",
    "make_extractor",
    "make_extractor_from",
    "normalize_text",
    "resolve_cache_dir",
    "tokenize",
]
