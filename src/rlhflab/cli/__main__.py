"""`python -m rlhflab.cli ...` (what torchrun launches): the console script."""

from rlhflab.cli import main

main()
