"""Pretrain a T5-style model with span corruption (default corpus: English and German verses).

    python scripts/run_span_corruption.py --output_dir runs/span_corruption --do_train --do_eval [--paper_recipe] ...

The same as `aiayn train span-corruption`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("span-corruption")
