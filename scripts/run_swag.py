"""Train a multiple-choice model on SWAG-style data (sent1, sent2, ending0..N, label).

    python scripts/run_swag.py --train_file data.json --output_dir runs/run_swag --do_train --do_eval ...

The same as `aiayn train multiple-choice`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("multiple-choice")
