"""The Cohort coordinator daemon: server, groups, offsets, the offsets log."""

__version__ = "0.1.0"
