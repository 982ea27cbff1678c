"""Train a seq2seq model from a source and a target text column (summarization and other text to text).

    python scripts/run_summarization.py --train_file data.json --output_dir runs/summaries --do_train ...

The same as `aiayn train summarization`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("summarization")
