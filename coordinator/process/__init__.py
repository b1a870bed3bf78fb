"""The life of a `cohort serve` process: daemon, `--workers` supervisor and workers, logging, GC pacing."""
