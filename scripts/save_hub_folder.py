"""Write a hub-ready folder (weights, config, generation config, tokenizer, modeling code, model card) from a model
saved with its tokenizer, e.g. the output of a training script.

    python scripts/save_hub_folder.py runs/en-de hub/en-de --dataset bible-en-de --language en --language de

The same as `aiayn hub-folder`. The folder is what `push_to_hub` would upload.
"""

import sys

from aiayn.cli import main

if __name__ == "__main__":
    main(["hub-folder", *sys.argv[1:]])
