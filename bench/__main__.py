"""Entry point: `python -m bench run|compare|report` (see bench/cli.py)."""
import sys

from bench.cli import main

sys.exit(main())
