"""Text cut into blocks of tokens: the inputs of the language-modelling tasks (run_clm, run_mlm) and of span
corruption."""

from itertools import chain

import datasets

from .task import map_options


def group_texts(examples: dict, block_size: int) -> dict:
    """Concatenates tokenized texts and cuts them into blocks of `block_size` tokens (the remainder is dropped)."""
    concatenated = {key: list(chain(*examples[key])) for key in examples}
    total = len(concatenated["input_ids"]) // block_size * block_size
    return {
        key: [value[i : i + block_size] for i in range(0, total, block_size)] for key, value in concatenated.items()
    }


def language_model_blocks(corpus, tokenizer, data_args, block_size: int, append_eos: bool) -> datasets.DatasetDict:
    """The text column tokenized (each text ended by EOS where `append_eos`: documents are separated by EOS in the
    token stream) and grouped into blocks of `block_size` tokens."""

    def tokenize(examples):
        texts = examples[data_args.text_column]
        if append_eos:
            texts = [text + tokenizer.eos_token for text in texts]
        return tokenizer(texts, return_attention_mask=False)

    columns = next(iter(corpus.values())).column_names  # any split: the held-out one alone is prepared too
    tokenized = corpus.map(tokenize, batched=True, remove_columns=columns, desc="Tokenizing",
                           **map_options(data_args))  # fmt: skip
    return tokenized.map(lambda e: group_texts(e, block_size), batched=True, desc=f"Grouping into {block_size}",
                         **map_options(data_args))  # fmt: skip
