"""Committed offsets: the in-memory table OffsetFetch reads (`table`) and the offset APIs (`manager`)."""
