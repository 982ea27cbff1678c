"""Tokenizers trained on a corpus and returned as transformers fast tokenizers.

Each family gets the kind of tokenizer its reference model uses, with special tokens at the ids the aiayn configs
expect (`pad_token_id=0`, `bos_token_id=1`, `eos_token_id=2`):

- decoder: byte-level BPE (GPT-2): `<pad> <s> </s> <unk>`, left padding for batched generation;
- encoder: WordPiece (BERT, cased): `[PAD] [CLS] [SEP] [UNK] [MASK]`, `[CLS] A [SEP] B [SEP]` templates;
- seq2seq: Unigram (T5's SentencePiece model): `<pad> <s> </s> <unk>`, `</s>` after every sequence, and
  `<extra_id_0>` ... sentinels for span corruption at the end of the vocabulary.

The same texts give the same tokenizer, ids and scores included, in every process and on any number of cores.
The trainers of `tokenizers` for WordPiece and Unigram alone do not: they visit the words in the order of a hash map
seeded anew in each process. WordPiece's trainer gives its `##` tokens ids in that order, and breaks ties between
merges by ids; so a first pass finds the `##` tokens and the training pass gets them, in order, with the special
tokens. The Unigram model is trained with `sentencepiece`, which reads the texts in order, on a fixed number of
threads with a fixed seed.
"""

import io
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

DECODER_SPECIAL = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
ENCODER_SPECIAL = {
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "unk_token": "[UNK]",
    "mask_token": "[MASK]",
}
SEQ2SEQ_SPECIAL = DECODER_SPECIAL


def sentinel(index: int) -> str:
    """The token that stands for the `index`-th masked span in T5's span corruption."""
    return f"<extra_id_{index}>"


def _byte_level_bpe(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(DECODER_SPECIAL.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, padding_side="left", **DECODER_SPECIAL)


def _wordpiece(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    texts = list(texts)  # read twice

    def untrained():
        tokenizer = Tokenizer(models.WordPiece(unk_token=ENCODER_SPECIAL["unk_token"]))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        return tokenizer

    def trainer(vocab_size, special_tokens):
        return trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False)

    # The trainer gives the special tokens and the characters ids in order but the "##" tokens of the characters
    # inside words ids in the order of a hash map, and merges with equal counts go in the order of their tokens' ids.
    # So a first pass (no merges) finds these tokens, and the second has them all in order before it learns merges.
    alphabet = untrained()
    alphabet.train_from_iterator(texts, trainer(0, list(ENCODER_SPECIAL.values())))
    vocab = alphabet.get_vocab()
    first = [token for token in sorted(vocab, key=vocab.get) if not token.startswith("##")]
    tokens = first + sorted(token for token in vocab if token.startswith("##"))
    learned = untrained()
    learned.train_from_iterator(texts, trainer(vocab_size, tokens))
    tokenizer = untrained()
    tokenizer.model = learned.model
    tokenizer.add_special_tokens(list(ENCODER_SPECIAL.values()))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **ENCODER_SPECIAL)


SENTENCEPIECE_THREADS = 4  # its sums, and so the scores, depend on the number of threads: fixed, not the cores'


def _unigram(texts: Iterable[str], vocab_size: int, num_sentinels: int) -> PreTrainedTokenizerFast:
    import sentencepiece

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(r"\s+", " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    sentences = [sentence for sentence in map(tokenizer.normalizer.normalize_str, texts) if sentence.strip()]
    # SentencePiece's own normalization off (the texts are normalized as the tokenizer will), pieces within words
    # that start with "▁" as Metaspace splits them, and every text read, none skipped for its length.
    model = io.BytesIO()
    sentencepiece.set_random_generator_seed(0)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        remove_extra_whitespaces=True,
        split_by_whitespace=True,
        split_by_unicode_script=False,
        split_by_number=False,
        treat_whitespace_as_suffix=False,
        byte_fallback=False,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        max_sentence_length=max([4192, *(len(sentence.encode()) + 1 for sentence in sentences)]),
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        pad_piece=SEQ2SEQ_SPECIAL["pad_token"],
        bos_piece=SEQ2SEQ_SPECIAL["bos_token"],
        eos_piece=SEQ2SEQ_SPECIAL["eos_token"],
        unk_piece=SEQ2SEQ_SPECIAL["unk_token"],
        num_threads=SENTENCEPIECE_THREADS,
        minloglevel=2,
    )
    trained = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    pieces = [(trained.id_to_piece(i), trained.get_score(i)) for i in range(trained.get_piece_size())]
    tokenizer.model = models.Unigram(pieces, unk_id=trained.unk_id())
    tokenizer.add_special_tokens(list(SEQ2SEQ_SPECIAL.values()))
    eos = tokenizer.token_to_id(SEQ2SEQ_SPECIAL["eos_token"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos)]
    )
    sentinels = [sentinel(i) for i in range(num_sentinels)]
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, additional_special_tokens=sentinels, **SEQ2SEQ_SPECIAL)


def train_tokenizer(
    family: str, texts: Iterable[str], vocab_size: int, num_sentinels: int = 100
) -> PreTrainedTokenizerFast:
    """A tokenizer for `family` (`"encoder"`, `"decoder"` or `"seq2seq"`) trained on `texts`; `vocab_size` counts
    the learned vocabulary with its special tokens (seq2seq adds `num_sentinels` sentinels on top)."""
    if family == "decoder":
        return _byte_level_bpe(texts, vocab_size)
    if family == "encoder":
        return _wordpiece(texts, vocab_size)
    if family == "seq2seq":
        return _unigram(texts, vocab_size, num_sentinels)
    raise ValueError(f"Unknown family {family!r}; the families are 'encoder', 'decoder' and 'seq2seq'.")


def config_token_fields(tokenizer: PreTrainedTokenizerFast, family: str) -> dict:
    """The config fields that must agree with `tokenizer`: vocabulary size and special token ids."""
    fields = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.cls_token_id if family == "encoder" else tokenizer.bos_token_id,
        "eos_token_id": tokenizer.sep_token_id if family == "encoder" else tokenizer.eos_token_id,
    }
    if family == "seq2seq":
        fields["decoder_start_token_id"] = tokenizer.pad_token_id
    return fields
