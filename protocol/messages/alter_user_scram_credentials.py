"""AlterUserScramCredentials (key 51): add, replace or delete SCRAM credentials.

The client salts and hashes: an upsertion carries the salt and the salted
password (SaltedPassword = Hi(password, salt, iterations)), never the password.
"""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, STRING, BYTES

AlterUserScramCredentialsRequest = message("AlterUserScramCredentialsRequest", 51, "0", "0+", [
    F("deletions", Array(Struct("ScramCredentialDeletion", [
        F("name", STRING),
        F("mechanism", INT8),
    ]))),
    F("upsertions", Array(Struct("ScramCredentialUpsertion", [
        F("name", STRING),
        F("mechanism", INT8),
        F("iterations", INT32),
        F("salt", BYTES),
        F("salted_password", BYTES),
    ]))),
])

AlterUserScramCredentialsResponse = message("AlterUserScramCredentialsResponse", 51, "0", "0+", [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("AlterUserScramCredentialsResult", [
        F("user", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
    ]))),
])
