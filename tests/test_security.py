"""Security: hub folders hold only the model's code and no pickle; pickles read on request cannot run code."""

import ast
import os
import pickle
import sys

import pytest
import transformers
from helpers import FAMILIES, lm_model, word_tokenizer
from transformers.dynamic_module_utils import get_relative_import_files

import aiayn
from aiayn.averaging import average_checkpoints
from aiayn.conversion import convert_checkpoint
from aiayn.hub import save_hub_folder

# The standard library's modules that reach outside the process: files, the network, other processes, native code,
# the interpreter's import and execution machinery, and the unpicklers.
REACHING_OUT = {
    "asyncio", "builtins", "bz2", "code", "codeop", "ctypes", "dbm", "fcntl", "ftplib", "glob", "gzip", "http",
    "imaplib", "imp", "importlib", "io", "lzma", "mailbox", "marshal", "mmap", "multiprocessing", "nntplib", "nt",
    "os", "pathlib", "pickle", "pkgutil", "platform", "poplib", "posix", "pty", "resource", "runpy", "select",
    "selectors", "shelve", "shutil", "signal", "smtplib", "socket", "socketserver", "sqlite3", "ssl", "subprocess",
    "sys", "tarfile", "telnetlib", "tempfile", "threading", "urllib", "webbrowser", "xmlrpc", "zipfile", "zipimport",
}  # fmt: skip
# torch and transformers, and the standard library but what reaches out. transformers requires huggingface_hub (its
# strict config dataclasses); peft's table of default LoRA targets is written where peft is installed
# (`name_tables_aiayn`, behind transformers' `is_peft_available()`, which the hub's import check honours).
ALLOWED_IMPORTS = {"torch", "transformers", "huggingface_hub", "peft"} | (set(sys.stdlib_module_names) - REACHING_OUT)
# Builtins that run or import code given as data, or reach files and the user.
FORBIDDEN_NAMES = {"eval", "exec", "compile", "__import__", "open", "input", "breakpoint", "globals", "__builtins__"}
# Functions that unpickle, download, compile or load native code, whether called as attributes or imported by name.
FORBIDDEN_ATTRIBUTES = {
    "load",
    "hub",
    "load_library",
    "cpp_extension",
    "jit",
    "package",
    "cached_file",
    "cached_files",
    "hf_hub_download",
    "snapshot_download",
    "get_class_from_dynamic_module",
    "load_state_dict",
}


def forbidden_uses(tree: ast.Module, local_modules: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each import from outside `ALLOWED_IMPORTS`, each forbidden builtin,
    and each forbidden function, reached as an attribute (`torch.load`) or imported by name (`from torch import
    load`, `from transformers.utils import cached_file as c`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] not in ALLOWED_IMPORTS
            ]
            found += [
                (node.lineno, alias.name) for alias in node.names if set(alias.name.split(".")) & FORBIDDEN_ATTRIBUTES
            ]
        elif isinstance(node, ast.ImportFrom):
            allowed = node.module in local_modules if node.level else node.module.split(".")[0] in ALLOWED_IMPORTS
            if not allowed or set((node.module or "").split(".")) & FORBIDDEN_ATTRIBUTES:
                found.append((node.lineno, node.module))
            found += [
                (node.lineno, alias.name)
                for alias in node.names
                if alias.name in FORBIDDEN_ATTRIBUTES | FORBIDDEN_NAMES or alias.name == "*"
            ]
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append((node.lineno, node.attr))
    return found


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


def copied_files(family: str) -> set[str]:
    """The files a folder of `family` copies, as transformers derives them: the modeling module and the
    configuration's, with the modules they import relatively (`get_relative_import_files`)."""
    package = os.path.dirname(aiayn.__file__)
    roots = [os.path.join(package, f"modeling_aiayn_{family}.py"), os.path.join(package, "configuration_aiayn.py")]
    return {os.path.basename(path) for root in roots for path in [root, *get_relative_import_files(root)]}


def saved_code(folder: str) -> dict[str, ast.Module]:
    code = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name)) as f:
                code[name] = ast.parse(f.read(), filename=name)
    return code


@pytest.mark.parametrize("family", [*FAMILIES, "vision"])
def test_a_hub_folder_holds_no_pickle_and_only_code_that_needs_nothing_but_torch_and_transformers(family, tmp_path):
    if family == "vision":
        model = transformers.AutoModelForImageClassification.from_config(aiayn.preset_config("tiny-vision"))
        save_hub_folder(model, transformers.ViTImageProcessor(), str(tmp_path))
    else:
        save_hub_folder(lm_model(family), word_tokenizer(), str(tmp_path))
    assert not [name for name in os.listdir(tmp_path) if name.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    code = saved_code(str(tmp_path))
    assert set(code) == copied_files(family)
    local_modules = {name.removesuffix(".py") for name in code}
    assert {name: forbidden_uses(tree, local_modules) for name, tree in code.items()} == {name: [] for name in code}


@pytest.mark.parametrize(
    "line",
    [
        "import os",
        "import torch.hub",
        "from torch import load",
        "from torch import load as read_weights",
        "from torch.serialization import load",
        "from transformers.utils import cached_file",
        "from transformers.dynamic_module_utils import get_class_from_dynamic_module",
        "from torch import *",
        "from subprocess import run",
        "from .elsewhere import weights",
        "weights = torch.load(path)",
        "from transformers.utils import hub",
        "code = eval(text)",
        "handle = open(path)",
    ],
)
def test_the_code_check_catches_each_way_of_reaching_forbidden_functions(line):
    assert forbidden_uses(ast.parse(line), {"modeling_aiayn"})


@pytest.mark.parametrize(
    "line",
    ["import math", "from collections.abc import Callable", "from functools import partial", "import torch.nn as nn"],
)
def test_the_code_check_lets_through_the_standard_library_that_stays_in_the_process(line):
    assert not forbidden_uses(ast.parse(line), {"modeling_aiayn"})


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
