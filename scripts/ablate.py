"""Train rows of the paper's Table 3 (and its base row) on the bundled English-German verses.

    python scripts/ablate.py --rows A E --budget 60 --seeds 1 --out runs/ablate

The same as `aiayn ablate` (see `aiayn ablate --help` and `aiayn.experiments.ablation`).
"""

import sys

from aiayn.cli import main

if __name__ == "__main__":
    main(["ablate", *sys.argv[1:]])
