"""Training recipes: the paper's (`PaperRecipe`, sections 5.3 and 5.4) and the one `aiayn train` gives a new model
trained without a learning rate (`from_scratch_recipe`), as `TrainingArguments` fields."""

from dataclasses import dataclass

import transformers

from .heads_aiayn import AiaynLanguageModel


@dataclass(frozen=True)
class PaperRecipe:
    """The paper's training recipe (sections 5.3 and 5.4) as `TrainingArguments` fields.

    Adam with beta1 = 0.9, beta2 = 0.98 and eps = 1e-9, no weight decay, label smoothing `label_smoothing` (0.1), and
    eq. (3)'s learning rate, `lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`: transformers'
    `inverse_sqrt` schedule, which rises linearly over `warmup_steps` to its peak and then falls as `step^-0.5`, with
    the peak `d_model^-0.5 * warmup_steps^-0.5` (eq. (3) at `step = warmup_steps`) unless `peak_learning_rate` is
    given. Shorter runs keep the shape and scale `warmup_steps` and `peak_learning_rate`.

    Attributes:
        warmup_steps: Steps of the linear warm-up (the paper: 4000); below 1, a share of the run's steps.
        peak_learning_rate: The learning rate at the end of the warm-up; None: eq. (3)'s, from `d_model`.
        label_smoothing: The label-smoothing factor (the paper: 0.1).

    Examples:
        >>> round(PaperRecipe().training_arguments(d_model=512)["learning_rate"], 6)
        0.000699
    """

    warmup_steps: float = 4000
    peak_learning_rate: float | None = None
    label_smoothing: float = 0.1

    def training_arguments(self, d_model: int | None = None) -> dict:
        """The `TrainingArguments` fields of the recipe; `d_model` gives the peak when `peak_learning_rate` is None."""
        if self.peak_learning_rate is None and d_model is None:
            raise ValueError("The paper's peak learning rate needs d_model when peak_learning_rate is not given.")
        peak = self.peak_learning_rate
        if peak is None:
            peak = d_model**-0.5 * self.warmup_steps**-0.5
        return {
            "learning_rate": peak,
            "warmup_steps": self.warmup_steps,
            "lr_scheduler_type": "inverse_sqrt",
            "adam_beta1": 0.9,
            "adam_beta2": 0.98,
            "adam_epsilon": 1e-9,
            "weight_decay": 0.0,
            "label_smoothing_factor": self.label_smoothing,
        }

    def apply(self, training_args: transformers.TrainingArguments, model: transformers.PreTrainedModel) -> None:
        """Sets the recipe for training `model` (its width, `config.hidden_size`, gives the peak when
        `peak_learning_rate` is None), before the `Trainer` is built: the optimizer and schedule on `training_args`,
        and the label smoothing where the loss is computed. An aiayn language model smooths its own loss
        (`config.label_smoothing`), computed without the batch's logits; for any other model the Trainer's
        `label_smoothing_factor` smooths the logits."""
        fields = self.training_arguments(model.config.hidden_size if self.peak_learning_rate is None else None)
        if isinstance(model, AiaynLanguageModel):
            model.config.label_smoothing = fields["label_smoothing_factor"]
            fields["label_smoothing_factor"] = 0.0
        for name, value in fields.items():
            setattr(training_args, name, value)


# The warm-up of the from-scratch recipe, as a share of the run's steps.
FROM_SCRATCH_WARMUP = 0.1


def from_scratch_recipe(model: transformers.PreTrainedModel) -> PaperRecipe:
    """The recipe of a new model trained without a learning rate: the paper's Adam (beta2 0.98, eps 1e-9) and
    inverse-square-root schedule with eq. (3)'s peak at the paper's 4000 warm-up steps, `d_model^-0.5 * 4000^-0.5`
    (1.98e-3 at d_model 64, 7.0e-4 at 512), reached after the first `FROM_SCRATCH_WARMUP` of the run's steps; no
    label smoothing of its own."""
    return PaperRecipe(FROM_SCRATCH_WARMUP, model.config.hidden_size**-0.5 * 4000**-0.5, label_smoothing=0.0)


@dataclass(frozen=True)
class FromScratch:
    """`from_scratch_recipe` for the model it is applied to (its width is known once the model is built), less the
    `given` flags, which keep the user's values; label smoothing stays the user's `--label_smoothing_factor`."""

    given: frozenset[str] = frozenset()

    def apply(self, training_args: transformers.TrainingArguments, model: transformers.PreTrainedModel) -> None:
        for name, value in from_scratch_recipe(model).training_arguments().items():
            if name not in self.given and name != "label_smoothing_factor":
                setattr(training_args, name, value)


def describe_recipe(args: transformers.TrainingArguments) -> str:
    warmup = f"{args.warmup_steps:.0%} of the steps" if args.warmup_steps < 1 else f"{args.warmup_steps:g} steps"
    return (
        f"Adam (beta2 {args.adam_beta2}, eps {args.adam_epsilon:g}) and the inverse-square-root schedule, peaking at "
        f"{args.learning_rate:.3g} after a warm-up of {warmup}"
    )
