"""Train an extractive question-answering model on SQuAD-format data.

    python scripts/run_qa.py --train_file data.json --output_dir runs/run_qa --do_train --do_eval ...

The same as `aiayn train question-answering`: flags of aiayn.training.ModelArguments, its DataArguments
and transformers' Seq2SeqTrainingArguments (`--help`); a single .json file of them also works. Runs unchanged under
`accelerate launch` and `torchrun`.
"""

from aiayn.training import main

if __name__ == "__main__":
    main("question-answering")
