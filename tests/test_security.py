"""Security: hub folders hold only the model's code and no pickle; pickles read on request cannot run code."""

import ast
import os
import pickle

import pytest
import transformers
from conftest import FAMILIES, lm_model, word_tokenizer

import aiayn
from aiayn.averaging import average_checkpoints
from aiayn.conversion import convert_checkpoint
from aiayn.hub import save_hub_folder

# torch and transformers, and the standard library's clock (AiaynLinear times its two routes).
ALLOWED_IMPORTS = {"torch", "transformers", "time"}
# Builtins that run or import code given as data, or reach files and the user.
FORBIDDEN_NAMES = {"eval", "exec", "compile", "__import__", "open", "input", "breakpoint", "globals", "__builtins__"}
# torch functions that unpickle, download, compile or load native code.
FORBIDDEN_ATTRIBUTES = {"load", "hub", "load_library", "cpp_extension", "jit", "package"}


class RunsCodeWhenUnpickled:
    def __reduce__(self):
        return print, ("this ran while loading the weights",)


def plant_pickle_that_runs_code(folder) -> None:
    """Replaces a folder's weights with a pickle that calls a function when loaded, as a malicious file would."""
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            os.remove(os.path.join(folder, name))
    with open(os.path.join(folder, "pytorch_model.bin"), "wb") as f:
        pickle.dump({"weight": RunsCodeWhenUnpickled()}, f, protocol=2)


def saved_code(folder: str) -> dict[str, ast.Module]:
    code = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name)) as f:
                code[name] = ast.parse(f.read(), filename=name)
    return code


@pytest.mark.parametrize("family", FAMILIES)
def test_a_hub_folder_holds_no_pickle_and_only_code_that_needs_nothing_but_torch_and_transformers(family, tmp_path):
    save_hub_folder(lm_model(family), word_tokenizer(), str(tmp_path))
    assert not [name for name in os.listdir(tmp_path) if name.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    code = saved_code(str(tmp_path))
    expected = {"configuration_aiayn.py", "modeling_aiayn.py", "cpu_linear.py", f"modeling_aiayn_{family}.py"}
    assert set(code) == expected | ({"pipeline_aiayn.py"} if family == "seq2seq" else set())
    local_modules = {name.removesuffix(".py") for name in code}
    for name, tree in code.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert {alias.name.split(".")[0] for alias in node.names} <= ALLOWED_IMPORTS, (name, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: only the folder's own modules
                    assert node.module in local_modules, (name, node.lineno, node.module)
                else:
                    assert node.module.split(".")[0] in ALLOWED_IMPORTS, (name, node.lineno, node.module)
            elif isinstance(node, ast.Name):
                assert node.id not in FORBIDDEN_NAMES, (name, node.lineno, node.id)
            elif isinstance(node, ast.Attribute):
                assert node.attr not in FORBIDDEN_ATTRIBUTES, (name, node.lineno, node.attr)


def test_pickles_read_on_request_are_read_as_weights_only(tmp_path, capsys):
    aiayn_folder = tmp_path / "aiayn"
    lm_model("decoder").save_pretrained(aiayn_folder)
    plant_pickle_that_runs_code(aiayn_folder)
    bert_folder = tmp_path / "bert"
    bert = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2))
    bert.save_pretrained(bert_folder)
    plant_pickle_that_runs_code(bert_folder)
    loads = {
        "from_pretrained": lambda: aiayn.AiaynDecoderForCausalLM.from_pretrained(aiayn_folder, use_safetensors=False),
        "average": lambda: average_checkpoints([str(aiayn_folder)] * 2, str(tmp_path / "avg"), allow_pickle=True),
        "convert": lambda: convert_checkpoint(str(bert_folder), str(tmp_path / "converted"), allow_pickle=True),
    }
    for name, load in loads.items():
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
            load()
        assert "this ran" not in capsys.readouterr().out, name
    assert not os.path.exists(tmp_path / "avg") and not os.path.exists(tmp_path / "converted")
