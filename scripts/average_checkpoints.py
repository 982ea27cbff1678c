"""Average the weights of checkpoints of one model into a new folder (section 6.1 of the paper).

    python scripts/average_checkpoints.py OUTPUT --run-dir runs/translation --last 5
    python scripts/average_checkpoints.py OUTPUT CHECKPOINT CHECKPOINT ...

The same as `aiayn average`. Reads safetensors only, unless given --allow-pickle.
"""

import sys

from aiayn.cli import main

if __name__ == "__main__":
    main(["average", *sys.argv[1:]])
