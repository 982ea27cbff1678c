"""The tasks of `aiayn train`, one module each (its `Task` declared by keyword, with its preprocessing, metrics,
baseline and predictions files beside it), registered here by name. The runner, `aiayn.training`, names none: a new
task is a module of this package and a line of `TASKS` (see the how-to, "Add a task")."""

from . import (
    causal_lm,
    classification,
    image_classification,
    masked_image_modeling,
    masked_lm,
    multiple_choice,
    question_answering,
    span_corruption,
    summarization,
    token_classification,
    translation,
)
from .task import Task

TASKS: dict[str, Task] = {
    "causal-lm": causal_lm.TASK,
    "masked-lm": masked_lm.TASK,
    "translation": translation.TASK,
    "span-corruption": span_corruption.TASK,
    "classification": classification.TASK,
    "token-classification": token_classification.TASK,
    "question-answering": question_answering.TASK,
    "multiple-choice": multiple_choice.TASK,
    "summarization": summarization.TASK,
    "image-classification": image_classification.TASK,
    "masked-image-modeling": masked_image_modeling.TASK,
}

__all__ = ["TASKS", "Task"]
