"""`python -m aiayn ...`: the `aiayn` command (also under `torchrun -m aiayn` and `accelerate launch -m aiayn`)."""

from .cli import main

if __name__ == "__main__":
    main()
