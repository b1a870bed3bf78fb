"""Cohort's thin Kafka-protocol client: membership, assignors, offsets, admin."""
