"""GloVe extractor: known vector values, mean pooling, OOV handling, tokenisation, pairs, options."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from fl_privtext.extract import GloveExtractor, make_extractor, normalize_text, tokenize
from fl_privtext.extract.glove import glove_table


def row(word: str) -> np.ndarray:
    t = glove_table()
    return np.asarray(t.vectors[t.vocab[word]], dtype=np.float32)


def test_known_vector_values(glove: GloveExtractor) -> None:
    # First line of Stanford's glove.6B.50d.txt: "the 0.418 0.24968 -0.41242 0.1217 0.34527 ..."
    assert glove_table().vocab["the"] == 0
    np.testing.assert_array_equal(
        row("the")[:5], np.array([0.418, 0.24968, -0.41242, 0.1217, 0.34527], dtype=np.float32)
    )
    x = glove.extract(["The"], progress=False)
    assert x.shape == (1, 50) and x.dtype == np.float32
    np.testing.assert_array_equal(x[0], row("the"))
    assert len(glove_table().vocab) == 400_000


def test_mean_of_words_weighted_by_occurrence(glove: GloveExtractor) -> None:
    x = glove.extract(["the cat", "The the cat."], progress=False)
    np.testing.assert_allclose(x[0], (row("the") + row("cat")) / 2, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(x[1], (2 * row("the") + row("cat") + row(".")) / 4, rtol=1e-6, atol=1e-7)


def test_oov_tokens_are_skipped(glove: GloveExtractor) -> None:
    x = glove.extract(["the qzxqzxvvq cat", "the cat"], progress=False)
    np.testing.assert_allclose(x[0], x[1], rtol=1e-6)
    assert glove.last_stats is not None
    assert (
        glove.last_stats.oov_tokens == 1
        and glove.last_stats.tokens == 5
        and glove.last_stats.empty_texts == 0
    )


def test_empty_and_all_oov_texts_get_zero_vector_and_are_counted(
    glove: GloveExtractor, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        x = glove.extract(["", "   ", "qzxqzxvvq", "<b></b>", "cat"], progress=False)
    np.testing.assert_array_equal(x[:4], 0.0)
    np.testing.assert_array_equal(x[4], row("cat"))
    assert glove.last_stats is not None and glove.last_stats.empty_texts == 4
    assert glove.extract([], progress=False).shape == (0, 50)
    # extract() itself is silent: it also embeds the inversion attack's vocabulary (one word at a time), which is
    # not the users' texts; the dataset's extraction reports them (next test)
    assert "no known token" not in caplog.text


def test_no_known_token_is_reported_once_for_the_users_texts_not_for_the_attack_vocabulary(
    glove: GloveExtractor, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from fl_privtext.extract import extract_cached

    from .conftest import TinyDataset

    vocabulary = ["cat", "the", "qzxqzxvvq", ",", "zzyzxq"]  # what pipeline's word_vectors hands the inversion attack
    with caplog.at_level(logging.WARNING):
        glove.extract(vocabulary, progress=False)
    assert glove.last_stats is not None and glove.last_stats.empty_texts == 2
    assert "no known token" not in caplog.text
    users = TinyDataset(["", "the cat", "qzxqzxvvq", "a dog", "<b></b>", "ok", "zzyzxq"])
    with caplog.at_level(logging.WARNING):
        extract_cached(users, glove, tmp_path, progress=False, chunk_rows=2)  # 4 chunks, one line
    lines = [r.getMessage() for r in caplog.records if "no known token" in r.getMessage()]
    assert lines == ["glove: 4 of 7 texts have no known token; they get the zero vector."]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Hello, World!", ["hello", ",", "world", "!"]),
        (
            "I don't think he can't or won't.",
            ["i", "do", "n't", "think", "he", "ca", "n't", "or", "wo", "n't", "."],
        ),
        (
            "Bush's plan; they're here, we'll see, I'd go, I'm in, we've won",
            [
                "bush",
                "'s",
                "plan",
                ";",
                "they",
                "'re",
                "here",
                ",",
                "we",
                "'ll",
                "see",
                ",",
                "i",
                "'d",
                "go",
                ",",
                "i",
                "'m",
                "in",
                ",",
                "we",
                "'ve",
                "won",
            ],
        ),
        (
            "O'Neill met Mr. Smith of the U.S. at 3:30 p.m.",
            ["o'neill", "met", "mr.", "smith", "of", "the", "u.s.", "at", "3:30", "p.m."],
        ),
        (
            "an 8,000-word e-mail costs $1.50 (10%)",
            ["an", "8,000-word", "e-mail", "costs", "$", "1.50", "(", "10", "%", ")"],
        ),
        ("Wait... -- 'quoted' \"twice\"", ["wait", "...", "--", "'", "quoted", "'", '"', "twice", '"']),
        ("see www.google.com/news. OK", ["see", "www.google.com/news", ".", "ok"]),
        ("Café naïve", ["café", "naïve"]),
        ("It\u2019s fine", ["it", "'s", "fine"]),
        # AG news artefacts: bare entities and HTML tags
        ("President Bush #39;s campaign", ["president", "bush", "'s", "campaign"]),
        ("doing  quot;everything quot; he can", ["doing", '"', "everything", '"', "he", "can"]),
        ("Broadcasting  amp; Cable &amp; Co", ["broadcasting", "&", "cable", "&", "co"]),
        (
            "Kerry  #151; responding; spent  #36;40 million",
            ["kerry", "—", "responding", ";", "spent", "$", "40", "million"],
        ),
        ("MYSTERY <b>...</b>  GEORGE <p>Bush</p>", ["mystery", "...", "george", "bush"]),
        ("", []),
    ],
)
def test_tokenize(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


def test_normalize_text_keeps_ordinary_semicolons_and_hashes() -> None:
    assert normalize_text("States; #1 pick") == "states; #1 pick"
    assert normalize_text("a #39;b") == "a 'b"


def test_unknown_compound_falls_back_to_known_parts(glove: GloveExtractor) -> None:
    vocab = glove_table().vocab
    assert "8,000-word" not in vocab and "end.the" not in vocab
    ids, n_tokens, n_oov = glove.token_ids("an 8,000-word end.the")
    assert ids == [vocab["an"], vocab["8,000"], vocab["word"], vocab["end"], vocab["the"]]
    assert (n_tokens, n_oov) == (3, 0)
    assert glove.token_ids("e-mail")[0] == [vocab["e-mail"]]  # a known compound stays whole


def test_pairs_concatenate_means(glove: GloveExtractor) -> None:
    a, b = ["the cat", "a dog"], ["a dog barks", ""]
    x = glove.extract(a, b, progress=False)
    assert x.shape == (2, 100) and glove.output_dim(paired=True) == 100
    np.testing.assert_array_equal(x[:, :50], glove.extract(a, progress=False))
    np.testing.assert_array_equal(x[:, 50:], glove.extract(b, progress=False))
    with pytest.raises(ValueError, match="must match"):
        glove.extract(a, b[:1], progress=False)


def test_chunking_does_not_change_outputs(glove: GloveExtractor) -> None:
    texts = ["the cat sat", "", "qzxqzxvvq", "on the mat .", "a", "dogs and cats"] * 3
    np.testing.assert_array_equal(
        GloveExtractor(batch_size=4).extract(texts, progress=False), glove.extract(texts, progress=False)
    )


def test_max_length_truncates_tokens_and_changes_identity(glove: GloveExtractor) -> None:
    short = GloveExtractor(max_length=1)
    np.testing.assert_array_equal(short.extract(["the cat"], progress=False)[0], row("the"))
    assert short.identity() != glove.identity()
    assert short.identity()["max_length"] == 1


def test_identity_is_json_and_hashes_the_vector_files(glove: GloveExtractor) -> None:
    ident = glove.identity()
    assert json.loads(json.dumps(ident)) == ident
    assert len(ident["vectors_sha256"]) == 64 and len(ident["index_sha256"]) == 64
    assert ident["tokenizer"] and ident["code"] and ident["package"]
    assert GloveExtractor().identity() == ident  # deterministic across instances


def test_make_extractor_validates_names_and_options() -> None:
    assert isinstance(make_extractor("glove"), GloveExtractor)
    with pytest.raises(ValueError, match="valid names are: glove, hf, minilm"):
        make_extractor("word2vec")
    with pytest.raises(ValueError, match="Unknown option"):
        make_extractor("glove", hidden=3)
    with pytest.raises(ValueError, match="pooling='mean' only"):
        make_extractor("glove", pooling="cls")
    with pytest.raises(ValueError, match="model must be None"):
        make_extractor("glove", model="/tmp/other")
    with pytest.raises(ValueError, match="single string"):
        GloveExtractor().extract("the cat", progress=False)


def test_word_memo_path_equals_the_token_by_token_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without max_length the extractor tokenises each distinct whitespace-separated word once (a memo); its output
    # must equal the reference path (every text tokenised whole, token by token: taken whenever max_length is set)
    # bit for bit, also across memo resets and on whitespace of every kind.
    from fl_privtext.data import load_dataset
    from fl_privtext.extract import glove as glove_module

    tricky = [
        "Don't  stop\tbelieving\nit's", "a\u2028b\x1cc\u3000d\u00a0e\x0bf", "MYSTERY <b>...</b>  GEORGE <p>Bush</p>",
        "<a href='x y'>link</a> text", "It\u2019s  #39;s  quot;q quot; &amp; AT&T's", "", "   ", "qzxqzxvvq zzqq",
        "www.google.com/news. OK e.g. U.S. mr. Smith p.m.", "an 8,000-word end.the 65-year-old --- ... ``x''",
        "Café naïve ÉCOLE", "the " * 300, "n't 's 'twas o'neill's rock'n'roll",
    ]
    texts = tricky + load_dataset("default").texts
    reference = GloveExtractor(max_length=10**9)  # longer than any text: truncates nothing
    expected = reference.extract(texts, progress=False)
    monkeypatch.setattr(glove_module, "_MEMO_WORDS", 50)  # the memo fills and is reset many times
    fast = GloveExtractor(batch_size=64)
    np.testing.assert_array_equal(fast.extract(texts, progress=False), expected)
    assert fast.last_stats == reference.last_stats
    assert fast.last_stats is not None and fast.last_stats.oov_tokens > 0 and fast.last_stats.empty_texts > 0


def test_block_sums_equal_one_reduceat_over_the_whole_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # _segment_sums gathers and sums the token vectors in blocks of about _BLOCK_TOKENS tokens of whole texts (cache
    # sized); each text must still be one segment summed in token order: the same bits as one reduceat over all.
    from fl_privtext.extract import glove as glove_module

    vectors = np.asarray(glove_table().vectors)
    g = np.random.default_rng(0)
    counts = g.integers(1, 40, 300)
    counts[[5, 6, 100]] = [200, 1, 97]  # texts longer than a block, and blocks cut next to them
    ids = g.integers(0, len(vectors), int(counts.sum()))
    starts = np.cumsum(counts) - counts
    expected = np.add.reduceat(vectors[ids], starts, axis=0)
    for block in (1, 7, 64, 10**6):
        monkeypatch.setattr(glove_module, "_BLOCK_TOKENS", block)
        np.testing.assert_array_equal(glove_module._segment_sums(vectors, ids, starts), expected)
