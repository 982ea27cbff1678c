"""Tokenizers trained with `tokenizers` on a corpus and returned as transformers fast tokenizers.

Each family gets the kind of tokenizer its reference model uses, with special tokens at the ids the aiayn configs
expect (`pad_token_id=0`, `bos_token_id=1`, `eos_token_id=2`):

- decoder: byte-level BPE (GPT-2): `<pad> <s> </s> <unk>`, left padding for batched generation;
- encoder: WordPiece (BERT, cased): `[PAD] [CLS] [SEP] [UNK] [MASK]`, `[CLS] A [SEP] B [SEP]` templates;
- seq2seq: Unigram (T5's SentencePiece model): `<pad> <s> </s> <unk>`, `</s>` after every sequence, and
  `<extra_id_0>` ... sentinels for span corruption at the end of the vocabulary.
"""

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
    tokenizer = Tokenizer(models.WordPiece(unk_token=ENCODER_SPECIAL["unk_token"]))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(ENCODER_SPECIAL.values()), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **ENCODER_SPECIAL)


def _unigram(texts: Iterable[str], vocab_size: int, num_sentinels: int) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(r"\s+", " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SEQ2SEQ_SPECIAL.values()),
        unk_token=SEQ2SEQ_SPECIAL["unk_token"],
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
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
