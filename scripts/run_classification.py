"""Fine-tune or train a sequence classifier (default: the genre of Shakespeare speeches).

    python scripts/run_classification.py --output_dir runs/run_classification --do_train --do_eval [--paper_recipe] ...

The same as `aiayn train classification`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("classification")
