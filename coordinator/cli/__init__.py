"""The `cohort` command line."""
