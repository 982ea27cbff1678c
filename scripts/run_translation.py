"""Train a T5-style translation model (default corpus: English-German verses).

    python scripts/run_translation.py --output_dir runs/run_translation --do_train --do_eval [--paper_recipe] ...

The same as `aiayn train translation`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("translation")
