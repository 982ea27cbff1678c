"""What a saved folder asks of whoever loads it with `trust_remote_code=True`: only the model's code, no pickle."""

import ast
import os

import pytest
from conftest import FAMILIES, lm_model, word_tokenizer

from aiayn.hub import save_hub_folder

ALLOWED_IMPORTS = {"torch", "transformers"}
# Builtins that run or import code given as data, or reach files and the user.
FORBIDDEN_NAMES = {"eval", "exec", "compile", "__import__", "open", "input", "breakpoint", "globals", "__builtins__"}
# torch functions that unpickle, download, compile or load native code.
FORBIDDEN_ATTRIBUTES = {"load", "hub", "load_library", "cpp_extension", "jit", "package"}


def saved_code(folder: str) -> dict[str, ast.Module]:
    code = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name)) as f:
                code[name] = ast.parse(f.read(), filename=name)
    return code


@pytest.mark.parametrize("family", FAMILIES)
def test_a_hub_folder_holds_no_pickle_and_code_that_imports_only_torch_and_transformers(family, tmp_path):
    save_hub_folder(lm_model(family), word_tokenizer(), str(tmp_path))
    assert not [name for name in os.listdir(tmp_path) if name.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    code = saved_code(str(tmp_path))
    expected = {"configuration_aiayn.py", "modeling_aiayn.py", f"modeling_aiayn_{family}.py"}
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
