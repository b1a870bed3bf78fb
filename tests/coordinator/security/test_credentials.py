"""SCRAM credentials: made from a password or from a client's salted password, the same keys either way."""
from __future__ import annotations

import pytest

from cohort.coordinator.records.types import ScramCredentialTombstone, decode_record, encode_record
from cohort.coordinator.security.credentials import (
    CredentialStore, ScramMechanism, credential_from_password, credential_from_salted_password, salted_password,
)


@pytest.mark.parametrize("mechanism", [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512])
def test_salted_password_from_a_client_gives_the_same_keys_as_the_password(mechanism):
    made = credential_from_password("alice", mechanism, "pw", iterations=4096)
    assert len(made.salt) >= 16 and made.iterations == 4096
    sent = salted_password(mechanism, "pw", made.salt, 4096)
    assert credential_from_salted_password("alice", mechanism, made.salt, sent, 4096) == made
    assert made.matches_password("pw") and not made.matches_password("pW")


def test_each_credential_gets_its_own_salt():
    a = credential_from_password("a", ScramMechanism.SCRAM_SHA_512, "pw", 4096)
    b = credential_from_password("a", ScramMechanism.SCRAM_SHA_512, "pw", 4096)
    assert a.salt != b.salt and a.stored_key != b.stored_key


def test_fewer_than_4096_iterations_are_refused():
    with pytest.raises(ValueError, match="4096"):
        credential_from_password("a", ScramMechanism.SCRAM_SHA_256, "pw", iterations=4095)


def test_repr_never_shows_salt_or_keys():
    c = credential_from_password("alice", ScramMechanism.SCRAM_SHA_256, "pw", 4096)
    text = repr(c)
    assert "alice" in text and "4096" in text
    for secret in (c.salt, c.stored_key, c.server_key):
        assert repr(secret) not in text and secret.hex() not in text


def test_store_replays_records_latest_wins_and_tombstones_delete():
    store = CredentialStore()
    old = credential_from_password("alice", ScramMechanism.SCRAM_SHA_512, "old", 4096)
    new = credential_from_password("alice", ScramMechanism.SCRAM_SHA_512, "new", 4096)
    for rec in (old.record(), new.record()):
        store.apply(decode_record(*encode_record(rec)))
    assert store.check_plain("alice", "new") and not store.check_plain("alice", "old")
    assert store.users() == ["alice"]
    store.apply(ScramCredentialTombstone("alice", 2))
    assert store.users() == [] and not store.check_plain("alice", "new")


def test_mechanism_names_follow_kafka():
    assert ScramMechanism.from_name("scram-sha-512") is ScramMechanism.SCRAM_SHA_512
    assert ScramMechanism.SCRAM_SHA_256.mechanism_name == "SCRAM-SHA-256"
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        ScramMechanism.from_name("SCRAM-SHA-1")
