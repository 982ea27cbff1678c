"""Corpora, tokenizers, metrics and the span-corruption collator."""

import hashlib
import json
import math
import os
import subprocess
import sys

import pytest
import sacrebleu
import torch
import transformers
from helpers import word_tokenizer

import aiayn
from aiayn import data
from aiayn.collators import (
    DataCollatorForSpanCorruption,
    DataCollatorSeededByBatch,
    random_spans_noise_mask,
    span_corruption_lengths,
)
from aiayn.metrics import Accuracy, ChrF, SacreBleu, perplexity
from aiayn.tokenization import config_token_fields, sentinel, train_tokenizer


def test_shakespeare_holds_speeches_by_play_with_whole_plays_held_out():
    corpus = data.shakespeare()
    assert (corpus["train"].num_rows, corpus["validation"].num_rows) == (25_539, 5_815)
    assert set(corpus["train"]["genre"]) == set(corpus["validation"]["genre"])  # each genre has held-out plays
    first = corpus["train"][0]
    assert first["text"].startswith("THESEUS:\nNow, fair Hippolyta, our nuptial hour\n")
    assert first["play"] == "a-midsummer-night-s-dream" and first["genre"] == "comedies"
    assert not set(corpus["train"]["play"]) & set(corpus["validation"]["play"])
    text = "".join(corpus["train"]["text"][:500])
    assert "**" not in text and "_Enter" not in text and "#" not in text and "  \n" not in text
    assert data.shakespeare()["validation"]["text"] == corpus["validation"]["text"]  # deterministic


def test_shakespeare_genres_are_long_speeches_of_comedies_histories_and_tragedies():
    corpus = data.load_corpus("shakespeare-genres")
    for split in corpus.values():
        assert set(split["genre"]) == {"comedies", "histories", "tragedies"}
        assert min(len(text.split()) for text in split["text"]) >= 40
    assert not set(corpus["train"]["play"]) & set(corpus["validation"]["play"])
    assert set(corpus["validation"]["play"]) == {
        "the-comedy-of-errors",
        "henry-iv-part-1",
        "henry-vi-part-3",
        "macbeth",
    }


def test_baselines_learn_nothing_from_context():
    from aiayn.baselines import (
        copy_source_scores,
        language_model_baselines,
        majority_accuracy,
        masked_lm_baselines,
        unigram_cross_entropy,
    )

    # Tokens 0 and 1 in proportion 3:1 (add-one smoothed over a vocabulary of 2: 4/6 and 2/6).
    loss = unigram_cross_entropy([0, 0, 0, 1], [0, 1], vocab_size=2)
    assert loss == pytest.approx((math.log(6 / 4) + math.log(6 / 2)) / 2)
    assert majority_accuracy(["a", "a", "b"], ["a", "b", "b", "b"]) == 0.25
    baselines = language_model_baselines([5] * 9 + [6], [5, 6], vocab_size=8)
    assert baselines["eval_perplexity"] == pytest.approx(math.exp(baselines["eval_loss"]))
    unigram = unigram_cross_entropy([5] * 9 + [6], [5, 6], vocab_size=8)
    # Every selected token a [MASK]: the unigram model. BERT's 80/10/10: half the bet on the visible token.
    only_masks = masked_lm_baselines([5] * 9 + [6], [5, 6], 8, mask_replace_prob=1.0, random_replace_prob=0.0)
    assert only_masks == {"eval_loss": pytest.approx(unigram), "eval_perplexity": pytest.approx(math.exp(unigram)),
                          "eval_accuracy": 0.5}  # fmt: skip
    bert = masked_lm_baselines([5] * 9 + [6], [5, 6], 8)
    assert bert["eval_loss"] == pytest.approx(0.9 * unigram + 0.2 * math.log(2))
    assert bert["eval_accuracy"] == pytest.approx(0.8 * 0.5 + 0.1)
    copied = copy_source_scores(["Jesus wept.", "Amen."], ["Jesus weinte.", "Amen."])
    assert 0 < copied["eval_chrf"] < 100  # shared names and punctuation score characters, no 4-gram
    verse = ["In the beginning God created the heavens and the earth."]
    assert copy_source_scores(verse, verse) == {"eval_bleu": pytest.approx(100), "eval_chrf": pytest.approx(100)}


def test_bible_pairs_are_aligned_and_split_by_chapter():
    corpus = data.bible_en_de()
    assert corpus["train"].num_rows + corpus["validation"].num_rows == 31_102
    first = corpus["train"][0]["translation"]
    assert first == {
        "en": "In the beginning God created the heavens and the earth.",
        "de": "Im Anfang schuf Gott die Himmel und die Erde.",
    }
    assert set(corpus["validation"]["chapter"]) <= set(range(10, 200, 10))
    assert all(c % 10 for c in corpus["train"]["chapter"])


def test_local_files_and_the_validation_split(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(f"line {i}" for i in range(40)))
    corpus = data.load_corpus(str(lines), validation_fraction=0.1)
    assert corpus["train"].num_rows == 36 and corpus["validation"].num_rows == 4
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps({"text": f"t{i}", "label": i % 2}) for i in range(20)))
    assert data.load_corpus(str(rows))["train"].column_names == ["text", "label"]
    with pytest.raises(ValueError, match="unsupported file type"):
        (tmp_path / "x.parquet2").write_text("")
        data.load_corpus(str(tmp_path / "x.parquet2"))
    with pytest.raises(ValueError, match="neither a dataset saved with save_to_disk nor images"):
        data.load_corpus(str(tmp_path))


@pytest.mark.parametrize("family", ["encoder", "decoder", "seq2seq"])
def test_tokenizers_agree_with_the_config_and_round_trip(family, tmp_path):
    texts = data.pydoc()["train"]["text"]
    tokenizer = train_tokenizer(family, texts, vocab_size=600)
    fields = config_token_fields(tokenizer, family)
    assert (fields["pad_token_id"], fields["bos_token_id"], fields["eos_token_id"]) == (0, 1, 2)
    config = aiayn.preset_config(
        {"encoder": "tiny-encoder", "decoder": "tiny-decoder", "seq2seq": "tiny"}[family], **fields
    )
    assert config.vocab_size == len(tokenizer)
    tokenizer.save_pretrained(tmp_path)
    reloaded = transformers.AutoTokenizer.from_pretrained(tmp_path)
    sentence = "The with statement wraps a block of code."
    assert reloaded(sentence).input_ids == tokenizer(sentence).input_ids
    decoded = reloaded.decode(reloaded(sentence).input_ids, skip_special_tokens=True)
    assert decoded.replace(" .", ".") == sentence
    ids = tokenizer(sentence).input_ids
    if family == "encoder":
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id and tokenizer.mask_token_id == 4
    if family == "seq2seq":
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.convert_tokens_to_ids(sentinel(99)) == len(tokenizer) - 1
    if family == "decoder":
        assert tokenizer.padding_side == "left"


def trained_tokenizer_digests() -> dict[str, str]:
    """The SHA-256 of each family's tokenizer trained on 500 speeches, by family."""
    texts = data.shakespeare()["train"]["text"][:500]
    digests = {}
    for family in ("encoder", "decoder", "seq2seq"):
        tokenizer = train_tokenizer(family, texts, vocab_size=800)
        digests[family] = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()
    return digests


def test_tokenizers_are_the_same_in_every_process():
    """Vocabulary, ids, merges and scores: this process and another with another hash seed (Python's set by
    PYTHONHASHSEED, the Rust hash maps of `tokenizers` seeded anew in each process) train the same tokenizer of each
    family on 500 speeches. (Where `tokenizers` trains in hash-map order, as its WordPiece and Unigram trainers do,
    the two already differ on 300.)"""
    other_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    code = "import json, test_data; print(json.dumps(test_data.trained_tokenizer_digests()))"
    other = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": other_seed},
                           cwd=os.path.dirname(__file__), capture_output=True, text=True, check=True)  # fmt: skip
    here, there = trained_tokenizer_digests(), json.loads(other.stdout.splitlines()[-1])
    assert set(here) == {"encoder", "decoder", "seq2seq"} and all(len(digest) == 64 for digest in here.values())
    for family, digest in here.items():
        assert there[family] == digest, family


def test_metrics_equal_sacrebleu_and_are_evaluate_modules():
    hypotheses = ["the cat sat on the mat", "a dog barked loudly at night"]
    references = [["the cat is on the mat"], ["a dog barked at night"]]
    bleu = SacreBleu().compute(predictions=hypotheses, references=references)["bleu"]
    assert bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [[r[0] for r in references]]).score)
    chrf = ChrF().compute(predictions=hypotheses, references=references)["chrf"]
    assert chrf == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [[r[0] for r in references]]).score)
    assert Accuracy().compute(predictions=[1, 2, 3, 4], references=[1, 2, 0, 4])["accuracy"] == 0.75
    assert perplexity(0.0) == 1.0 and perplexity(2.0) == pytest.approx(7.389056)


def test_span_corruption_lengths_match_t5():
    # T5's settings for 512-token inputs: 568 raw tokens, 114 target tokens.
    assert span_corruption_lengths(512, 0.15, 3.0) == (568, 114)


def test_noise_mask_has_the_asked_density_and_alternates():
    mask = random_spans_noise_mask(568, 0.15, 3.0, torch.Generator().manual_seed(0))
    assert mask.sum() == round(568 * 0.15) and not mask[0]
    starts = (mask[1:] & ~mask[:-1]).sum()
    assert starts == round(85 / 3.0)


def test_span_corruption_inputs_and_targets_rebuild_the_text():
    tokenizer = train_tokenizer("seq2seq", data.pydoc()["train"]["text"], vocab_size=600)
    tokens_length, target_length = span_corruption_lengths(64, 0.15, 3.0)
    blocks = [{"input_ids": list(range(10, 10 + tokens_length))}, {"input_ids": list(range(200, 200 + tokens_length))}]
    model = aiayn.AiaynSeq2SeqForConditionalGeneration(
        aiayn.preset_config("tiny", **config_token_fields(tokenizer, "seq2seq"))
    )
    batch = DataCollatorForSpanCorruption(tokenizer, seed=3, model=model)(blocks)
    assert batch["input_ids"].shape == (2, 64) and batch["labels"].shape == (2, target_length)
    sentinels = {tokenizer.convert_tokens_to_ids(sentinel(i)): i for i in range(100)}
    for row, block in enumerate(blocks):
        spans, current = {}, None
        for token in batch["labels"][row, :-1].tolist():  # sentinel, its span, next sentinel, ...
            if token in sentinels:
                current = sentinels[token]
                spans[current] = []
            else:
                spans[current].append(token)
        rebuilt = []
        for token in batch["input_ids"][row, :-1].tolist():
            rebuilt.extend(spans[sentinels[token]] if token in sentinels else [token])
        assert rebuilt == block["input_ids"]
    assert torch.equal(batch["decoder_input_ids"], model.prepare_decoder_input_ids_from_labels(batch["labels"]))
    again = DataCollatorForSpanCorruption(tokenizer, seed=3, model=model)(blocks)
    assert torch.equal(again["input_ids"], batch["input_ids"])


def test_random_collators_draw_from_the_batch_not_from_running_state():
    """Masks depend on the seed and the batch only (so resumed runs are exact), and torch's global generator, which
    dropout draws from, is left where it was."""
    tokenizer = word_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    collator = DataCollatorSeededByBatch(
        transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.5), seed=1
    )
    batch = [{"input_ids": list(range(3, 40))}, {"input_ids": list(range(40, 77))}]
    torch.manual_seed(0)
    first = collator(batch)
    state_after = torch.random.get_rng_state()
    torch.manual_seed(0)
    assert torch.equal(state_after, torch.random.get_rng_state())
    torch.manual_seed(123)
    again = collator(batch)
    assert torch.equal(first["input_ids"], again["input_ids"]) and torch.equal(first["labels"], again["labels"])
    reordered = collator(batch[::-1])
    other_seed = DataCollatorSeededByBatch(collator.collator, seed=2)(batch)
    assert not torch.equal(reordered["labels"], first["labels"].flip(0))
    assert not torch.equal(other_seed["labels"], first["labels"])
