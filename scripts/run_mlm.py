"""Train a BERT-style masked language model (default corpus: Shakespeare).

    python scripts/run_mlm.py --output_dir runs/run_mlm --do_train --do_eval [--paper_recipe] ...

The same as `aiayn train masked-lm`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("masked-lm")
