"""The FLOP count behind the benchmark's model FLOPs utilisation, checked against torch's own count."""

import importlib.util
import os

import pytest
from conftest import FAMILIES, lm_inputs, lm_model, random_ids
from torch.utils.flop_counter import FlopCounterMode

COMPARE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "compare.py")


def load_compare():
    spec = importlib.util.spec_from_file_location("compare", COMPARE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("hidden_act", ["relu", "swiglu"])
def test_training_flops_are_the_matmul_flops_torch_counts(family, hidden_act):
    """The model FLOPs of the step as the references compute it: the logits of every position. (aiayn's own training
    step projects only the labelled positions, so it does at most these.)"""
    model = lm_model(family, "eager", hidden_act=hidden_act).train()
    ids = random_ids(2, 12)
    inputs = lm_inputs(family, ids)
    with FlopCounterMode(display=False) as counter:
        model(**inputs, labels=ids, skip_logits=False).loss.backward()
    assert counter.get_total_flops() == load_compare().training_flops(model.config, batch=2, length=12)
