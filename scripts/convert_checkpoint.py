"""Convert a BERT, GPT-2, T5 or BART folder saved by transformers into an aiayn folder.

    python scripts/convert_checkpoint.py path/to/bert-folder path/to/aiayn-folder [--allow-pickle]

The same as `aiayn convert`.
"""

import sys

from aiayn.cli import main

if __name__ == "__main__":
    main(["convert", *sys.argv[1:]])
