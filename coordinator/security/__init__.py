"""Kafka's security model for Cohort: who a connection is (SASL, TLS) and what it may do (ACLs)."""
