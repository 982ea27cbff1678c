"""Train a token classifier (a tag per word, e.g. named entities) on JSON lines of tokens and ner_tags.

    python scripts/run_ner.py --train_file data.json --output_dir runs/run_ner --do_train --do_eval ...

The same as `aiayn train token-classification`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("token-classification")
