"""Train a GPT-style causal language model (default corpus: Shakespeare).

    python scripts/run_clm.py --output_dir runs/run_clm --do_train --do_eval [--paper_recipe] ...

The same as `aiayn train causal-lm`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("causal-lm")
