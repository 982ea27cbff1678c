"""The paper's Table 3 at the scale of one machine (`aiayn ablate`), and the same-budget comparison with transformers'
own implementation of the architecture, `MarianMTModel` (`aiayn versus-marian`).

Every run trains a translation model on the bundled English-German verses (`bible-en-de`) with the paper's recipe
(`recipes.PaperRecipe`: its Adam, label smoothing 0.1 and eq. (3)'s shape, with warmup and peak scaled to hundreds of
steps) and residual and embedding dropout 0.1 (sections 5.3, 5.4). All runs share one tokenizer, one data order per
seed and the validation split. They report the validation perplexity per token (the cross-entropy without label
smoothing) and BLEU / chrF of beam search with beam 4 and length penalty 0.6 (section 6.1), as Table 3 does on
newstest2013 (the paper's perplexity is per word-piece of its own vocabulary).

The base row is the paper's base model with widths divided by 4 and depth by 2: d_model 128, d_ff 512, h 8,
d_k = d_v = 16, N = 3. Each variation of Table 3 is applied to that base the same way (row A keeps
h * d_k = d_model, so compute stays constant; d_k in row B sets d_v too, as aiayn's heads have one size).

Row S is not Table 3's: section 3.2.1's comparison of unscaled dot products, scaled dot products and additive scores
at d_k = 32 to 256, with the statistics of the attention logits behind it (`attention_scores`). It runs when asked
(`--rows S`), best with a budget of steps, since additive scores cost far more time per step.
"""

import contextlib
import json
import math
import os
import time
from dataclasses import dataclass, field

import datasets
import torch
import transformers
from tqdm.auto import tqdm
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from ..conversion import bart_layer_weights
from ..data import load_corpus
from ..positions_aiayn import AiaynSinusoidalPositionEmbedding
from ..tokenization import train_tokenizer
from ..training import DataArguments, ModelArguments, PaperRecipe, build_trainer, evaluate, sample
from .attention_scores import attention_statistics, mechanism_plot, mechanism_table, score_variants

MAX_PAIR_TOKENS = 28  # verses of up to 28 tokens a side: a third of the corpus, learnt from in minutes
MARIAN_POSITIONS = 512
WARMUP_STEPS, PEAK_LEARNING_RATE = 100, 1e-3  # eq. (3)'s shape over runs of hundreds of steps
BASE = {"d_model": 128, "d_ff": 512, "num_heads": 8, "d_kv": 16, "num_layers": 3, "num_decoder_layers": 3}


@dataclass(frozen=True)
class Variant:
    """One row of Table 3: config fields changed from the base, the label smoothing, and the paper's dev results
    (newstest2013 perplexity and BLEU, parameters in millions where the paper gives them)."""

    row: str
    name: str
    config: dict = field(default_factory=dict)
    label_smoothing: float = 0.1
    paper: tuple[float, float, float | None] | None = (4.92, 25.8, 65)


VARIANTS = (
    Variant("base", "base"),
    Variant("A", "h=1, d_k=128", {"num_heads": 1, "d_kv": 128}, paper=(5.29, 24.9, None)),
    Variant("A", "h=4, d_k=32", {"num_heads": 4, "d_kv": 32}, paper=(5.00, 25.5, None)),
    Variant("A", "h=16, d_k=8", {"num_heads": 16, "d_kv": 8}, paper=(4.91, 25.8, None)),
    Variant("B", "d_k=4", {"d_kv": 4}, paper=(5.16, 25.1, 58)),
    Variant("B", "d_k=8", {"d_kv": 8}, paper=(5.01, 25.4, 60)),
    Variant("C", "N=1", {"num_layers": 1, "num_decoder_layers": 1}, paper=(6.11, 23.7, 36)),
    Variant("C", "N=2", {"num_layers": 2, "num_decoder_layers": 2}, paper=(5.19, 25.3, 50)),
    Variant("C", "N=4", {"num_layers": 4, "num_decoder_layers": 4}, paper=(4.88, 25.5, 80)),
    Variant("C", "d_model=64, d_k=8", {"d_model": 64, "d_kv": 8}, paper=(5.75, 24.5, 28)),
    Variant("C", "d_model=256, d_k=32", {"d_model": 256, "d_kv": 32}, paper=(4.66, 26.0, 168)),
    Variant("C", "d_ff=256", {"d_ff": 256}, paper=(5.12, 25.4, 53)),
    Variant("C", "d_ff=1024", {"d_ff": 1024}, paper=(4.75, 26.2, 90)),
    Variant("D", "P_drop=0.0", {"dropout": 0.0}, paper=(5.77, 24.6, None)),
    Variant("D", "P_drop=0.2", {"dropout": 0.2}, paper=(4.95, 25.5, None)),
    Variant("D", "eps_ls=0.0", label_smoothing=0.0, paper=(4.67, 25.3, None)),
    Variant("D", "eps_ls=0.2", label_smoothing=0.2, paper=(5.47, 25.7, None)),
    Variant("E", "learned positions", {"position_embedding_type": "learned"}, paper=(4.92, 25.7, None)),
    *score_variants(Variant),
)
TABLE_3_ROWS = ("A", "B", "C", "D", "E")
ROWS = (*TABLE_3_ROWS, "S")


@dataclass(frozen=True)
class Budget:
    """How long each run trains: `seconds` of wall time, or `steps` optimizer steps."""

    seconds: float | None = None
    steps: int | None = None

    @classmethod
    def parse(cls, text: str) -> "Budget":
        """`"60"` or `"60s"`: seconds; `"500steps"`: steps."""
        if text.endswith("steps"):
            return cls(steps=int(text.removesuffix("steps")))
        return cls(seconds=float(text.removesuffix("s")))

    def __str__(self) -> str:
        return f"{self.steps} steps" if self.steps is not None else f"{self.seconds:g} s"

    def training_arguments(self) -> dict:
        """The `TrainingArguments` of a run over this budget that prints nothing but its progress bar
        (`BudgetProgress`) and saves and evaluates nothing on its own."""
        return {
            "max_steps": self.steps if self.steps is not None else 10**7,  # a time budget stops the run instead
            "eval_strategy": "no",
            "save_strategy": "no",
            "logging_strategy": "no",
            "report_to": "none",
            "disable_tqdm": True,
            "dataloader_pin_memory": torch.cuda.is_available(),
        }


class BudgetProgress(TrainerCallback):
    """A progress bar over the budget, ending training when a time budget is spent."""

    def __init__(self, budget: Budget, label: str):
        self.budget, self.label = budget, label

    def on_train_begin(self, args, state, control, **kwargs):
        total = self.budget.steps if self.budget.steps is not None else math.ceil(self.budget.seconds)
        unit = "step" if self.budget.steps is not None else "s"
        self.bar = tqdm(total=total, desc=self.label, unit=unit, leave=False)
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.budget.steps is not None:
            self.bar.update(1)
            return
        elapsed = time.perf_counter() - self.start
        self.bar.update(min(int(elapsed), self.bar.total) - self.bar.n)  # whole seconds
        if elapsed >= self.budget.seconds:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self.bar.close()


def shared_tokenizer(folder: str, vocab_size: int, train_samples: int | None) -> str:
    """Trains the runs' tokenizer on both sides of the training verses, once, and returns its folder: all of them, or
    the `train_samples` that the first seed's runs draw (`training.sample`)."""
    path = os.path.join(folder, "tokenizer")
    if not os.path.isdir(path):
        train = sample(load_corpus("bible-en-de")["train"], train_samples, seed=0)
        texts = (text for pair in train["translation"] for text in (pair["en"], pair["de"]))
        train_tokenizer("seq2seq", texts, vocab_size).save_pretrained(path)
    return path


def training_arguments(output_dir: str, budget: Budget, label_smoothing: float, seed: int, use_cpu: bool):
    """The arguments of every run, aiayn's and Marian's: the paper's recipe with `label_smoothing`, over `budget`."""
    recipe = PaperRecipe(WARMUP_STEPS, PEAK_LEARNING_RATE, label_smoothing)
    return transformers.Seq2SeqTrainingArguments(
        output_dir=output_dir,
        **budget.training_arguments(),
        per_device_train_batch_size=32,
        per_device_eval_batch_size=64,
        **recipe.training_arguments(),
        predict_with_generate=True,
        train_sampling_strategy="group_by_length",
        use_cpu=use_cpu,
        seed=seed,
    )


def aiayn_trainer(config: dict, label_smoothing: float, budget: Budget, seed: int, tokenizer: str, folder: str,
                  samples: tuple[int | None, int], use_cpu: bool) -> Seq2SeqTrainer:  # fmt: skip
    """The Seq2SeqTrainer of one run: the `transformer-base` preset (the paper's model, decoding and dropout) with
    the base's sizes and `config`'s changes, on `samples = (training, validation)` verses (all training verses:
    None)."""
    overrides = ",".join(f"{key}={value}" for key, value in {**BASE, **config}.items())
    model_args = ModelArguments(preset="transformer-base", config_overrides=overrides, tokenizer_name=tokenizer)
    data_args = DataArguments(
        dataset_name="bible-en-de",
        max_pair_tokens=MAX_PAIR_TOKENS,
        max_train_samples=samples[0],
        max_eval_samples=samples[1],
    )
    arguments = training_arguments(folder, budget, label_smoothing, seed, use_cpu)
    return build_trainer("translation", model_args, data_args, arguments)


def train_and_evaluate(trainer: Seq2SeqTrainer, budget: Budget, label: str) -> dict:
    trainer.remove_callback(PrinterCallback)  # the runs' results are printed as a line each
    trainer.add_callback(BudgetProgress(budget, label))
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    metrics = evaluate(trainer)
    return {
        # Trained parameters: Marian keeps its sinusoids in a frozen embedding table.
        "parameters": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "steps": trainer.state.global_step,
        "train_seconds": round(train_seconds, 1),
        "loss": metrics["eval_loss"],
        "perplexity": math.exp(metrics["eval_loss"]),
        "bleu": metrics["eval_bleu"],
        "chrf": metrics["eval_chrf"],
    }


def spread(values: list[float], digits: int) -> str:
    """`mean` for one value, `mean ± half the range` for several."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {(max(values) - min(values)) / 2:.{digits}f}"


def ablation_table(results: list[dict]) -> str:
    header = ("row", "variant", "params", "steps", "PPL (dev)", "BLEU (dev)", "paper PPL", "paper BLEU",
              "paper params")  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        runs = result["runs"]
        paper_ppl, paper_bleu, paper_params = result["paper"] or (None, None, None)
        cells = (
            result["row"], result["variant"], f"{runs[0]['parameters'] / 1e6:.2f}M",
            spread([run["steps"] for run in runs], 0), spread([run["perplexity"] for run in runs], 2),
            spread([run["bleu"] for run in runs], 2), f"{paper_ppl:.2f}" if paper_ppl else "",
            f"{paper_bleu:.1f}" if paper_bleu else "", f"{paper_params}M" if paper_params else "",
        )  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ablation_plot(path: str, results: list[dict]) -> str:
    """BLEU and perplexity of each variant (mean and range over seeds), the base row's as a dashed line."""
    from .plots import _pyplot, _save

    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 0.35 * len(results) + 1.5), sharey=True)
    names = [f"({r['row']}) {r['variant']}" if r["row"] != "base" else "base" for r in results]
    for axis, key, title in ((axes[0], "perplexity", "validation perplexity (lower is better)"),
                             (axes[1], "bleu", "BLEU, beam 4 (higher is better)")):  # fmt: skip
        values = [[run[key] for run in r["runs"]] for r in results]
        means = [sum(v) / len(v) for v in values]
        below = [m - min(v) for m, v in zip(means, values, strict=True)]
        above = [max(v) - m for m, v in zip(means, values, strict=True)]
        errors = [below, above]
        axis.errorbar(means, range(len(results)), xerr=errors, fmt="o", capsize=3)
        axis.axvline(means[0], linestyle="--", color="gray")
        axis.set_title(title)
    axes[0].set_yticks(range(len(results)), names)
    axes[0].invert_yaxis()
    return _save(figure, path)


def ablate(out: str, rows: tuple[str, ...] = TABLE_3_ROWS, budget: Budget = Budget(seconds=60), seeds: int = 1,
           eval_samples: int = 300, train_samples: int | None = None, vocab_size: int = 2000,
           use_cpu: bool = False) -> list[dict]:  # fmt: skip
    """Trains the base row and `rows` of Table 3 (and row S, the attention scores) with `seeds` seeds each; writes
    `ablation.json`, `ablation.md` and `ablation.png` (with row S also `attention_scores.png`; plots with the `plot`
    extra) to `out` and returns the results."""
    os.makedirs(out, exist_ok=True)
    datasets.disable_progress_bars()
    tokenizer = shared_tokenizer(out, vocab_size, train_samples)
    variants = [v for v in VARIANTS if v.row == "base" or v.row in rows]
    results = []
    for number, variant in enumerate(variants, 1):
        runs = []
        for seed in range(seeds):
            label = f"[{number}/{len(variants)}] ({variant.row}) {variant.name}, seed {seed}"
            name = f"{variant.row}-{variant.name}-{seed}".replace(" ", "").replace(",", "_")
            folder, samples = os.path.join(out, "runs", name), (train_samples, eval_samples)
            trainer = aiayn_trainer(variant.config, variant.label_smoothing, budget, seed, tokenizer, folder, samples,
                                    use_cpu)  # fmt: skip
            if variant.row == "S":  # one fixed batch of validation verses, before and after training
                batch = trainer._prepare_inputs(next(iter(trainer.get_eval_dataloader())))
                at_init = attention_statistics(trainer.model, batch)
            runs.append(train_and_evaluate(trainer, budget, label))
            if variant.row == "S":
                runs[-1].update(at_init=at_init, trained=attention_statistics(trainer.model, batch))
            tqdm.write(f"{label}: {runs[-1]}")
        results.append({"row": variant.row, "variant": variant.name, "config": variant.config,
                        "label_smoothing": variant.label_smoothing, "paper": variant.paper, "runs": runs})  # fmt: skip
    table = ablation_table(results)
    if "S" in rows:
        table += "\n\nAttention logits (row S), on one batch of validation verses:\n\n" + mechanism_table(results)
    with open(os.path.join(out, "ablation.json"), "w") as f:
        json.dump({"budget": str(budget), "seeds": seeds, "base": BASE, "results": results}, f, indent=2)
    with open(os.path.join(out, "ablation.md"), "w") as f:
        f.write(f"Budget {budget} per run, {seeds} seed(s), {eval_samples} validation verses.\n\n{table}\n")
    with contextlib.suppress(ImportError):  # without the `plot` extra, no plot
        ablation_plot(os.path.join(out, "ablation.png"), results)
        if "S" in rows:
            mechanism_plot(os.path.join(out, "attention_scores.png"), results)
    print(table)
    return results


def marian_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict of a `MarianMTModel` computing what the aiayn seq2seq `model` of the paper's layout computes
    (post-LN, tied scaled embeddings, sinusoids): each layer's weights under Marian's names, which are BART's
    (`conversion.bart_layer_weights` splits the fused projections), and aiayn's interleaved sinusoids in Marian's
    position tables (Marian lays out all sines, then all cosines)."""
    source, config = model.state_dict(), model.config
    positions = torch.arange(MARIAN_POSITIONS, device=model.device)[None]
    sinusoids = AiaynSinusoidalPositionEmbedding(config.d_model)(positions)[0]
    weights = {"model.shared.weight": source["model.shared.weight"]}
    for side, count in (("encoder", config.num_layers), ("decoder", config.num_decoder_layers)):
        for i in range(count):
            weights.update(bart_layer_weights(source, f"model.{side}.layers.{i}", side == "decoder"))
        weights[f"model.{side}.embed_positions.weight"] = sinusoids
    return weights


def marian_trainer(aiayn: Seq2SeqTrainer, seed: int, folder: str, use_cpu: bool, same_init: bool) -> Seq2SeqTrainer:
    """transformers' `MarianMTModel` configured as the aiayn model of `aiayn` (sizes, post-LN, scaled sinusoidal
    embeddings shared by both sides and the output, ReLU, dropout, decoding), with its data, arguments and metrics;
    started from the aiayn model's initial weights (`same_init`) or from Marian's own initialisation."""
    config = aiayn.model.config
    transformers.set_seed(seed)
    marian_config = transformers.MarianConfig(
        vocab_size=config.vocab_size, d_model=config.d_model, encoder_layers=config.num_layers,
        decoder_layers=config.num_decoder_layers, encoder_attention_heads=config.num_heads,
        decoder_attention_heads=config.num_heads, encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff,
        activation_function=config.hidden_act, dropout=config.dropout, attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout, max_position_embeddings=MARIAN_POSITIONS, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, pad_token_id=config.pad_token_id,
        eos_token_id=config.eos_token_id, decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,
    )  # fmt: skip
    model = transformers.MarianMTModel(marian_config)
    if same_init:
        model.load_state_dict(marian_weights(aiayn.model), strict=False)  # the rest: tied tables, a zero logit bias
    # Beam 4, length penalty 0.6; aiayn's "source length + 50" is at most 28 + 50 tokens on these verses.
    model.generation_config.update(num_beams=4, length_penalty=0.6, max_new_tokens=MAX_PAIR_TOKENS + 50)
    budget = Budget(steps=aiayn.args.max_steps)
    args = training_arguments(folder, budget, aiayn.args.label_smoothing_factor, seed, use_cpu)
    return Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=aiayn.train_dataset,
        eval_dataset=aiayn.eval_dataset,
        processing_class=aiayn.processing_class,
        data_collator=DataCollatorForSeq2Seq(aiayn.processing_class, model=model),
        compute_metrics=aiayn.compute_metrics,
    )


MODELS = ("aiayn", "Marian, aiayn's initial weights", "Marian, its own initialisation")


def versus_marian(out: str, steps: int = 1000, seeds: int = 3, eval_samples: int = 300,
                  train_samples: int | None = None, vocab_size: int = 2000,
                  use_cpu: bool = False) -> dict:  # fmt: skip
    """aiayn's base row and `MarianMTModel` of the same architecture, trained with the same tokenizer, data order,
    recipe, steps and seeds, Marian once from the aiayn model's initial weights and once from its own initialisation;
    writes `versus_marian.json` and `versus_marian.md` and returns the results."""
    os.makedirs(out, exist_ok=True)
    datasets.disable_progress_bars()
    tokenizer = shared_tokenizer(out, vocab_size, train_samples)
    budget = Budget(steps=steps)
    results = {name: [] for name in MODELS}
    for seed in range(seeds):
        aiayn = aiayn_trainer({}, 0.1, budget, seed, tokenizer, os.path.join(out, f"aiayn-{seed}"),
                              (train_samples, eval_samples), use_cpu)  # fmt: skip
        marians = (marian_trainer(aiayn, seed, os.path.join(out, f"marian-{init}-{seed}"), use_cpu, same_init)
                   for init, same_init in (("aiayn-init", True), ("own-init", False)))  # fmt: skip
        trainers = (aiayn, *marians)  # Marian copies aiayn's weights before aiayn trains
        for name, trainer in zip(MODELS, trainers, strict=True):
            results[name].append(train_and_evaluate(trainer, budget, f"{name}, seed {seed}"))
            tqdm.write(f"{name}, seed {seed}: {results[name][-1]}")
    header = "| model | params | steps | validation loss | perplexity | BLEU | chrF |\n|---|---|---|---|---|---|---|"
    lines = [header]
    for name, runs in results.items():
        cells = (name, f"{runs[0]['parameters'] / 1e6:.2f}M", str(steps), spread([r["loss"] for r in runs], 3),
                 spread([r["perplexity"] for r in runs], 2), spread([r["bleu"] for r in runs], 2),
                 spread([r["chrf"] for r in runs], 2))  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    with open(os.path.join(out, "versus_marian.json"), "w") as f:
        json.dump({"steps": steps, "seeds": seeds, "base": BASE, "results": results}, f, indent=2)
    with open(os.path.join(out, "versus_marian.md"), "w") as f:
        f.write(f"{steps} steps, {seeds} seed(s), {eval_samples} validation verses.\n\n{table}\n")
    print(table)
    return results
