"""The Cohort coordinator daemon: server, groups, offsets, the offsets log."""
import cohort.protocol  # noqa: F401 - first: it installs COHORT_PURE_PYTHON's switch (protocol/compiled.py)

__version__ = "0.1.0"
