"""DescribeUserScramCredentials (key 50): which SCRAM mechanisms (and iterations) each user has.

A null user list means every user. Salts and salted passwords are never described.
"""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, STRING

DescribeUserScramCredentialsRequest = message("DescribeUserScramCredentialsRequest", 50, "0", "0+", [
    F("users", Array(Struct("UserName", [
        F("name", STRING),
    ])), nullable="0+"),
])

DescribeUserScramCredentialsResponse = message("DescribeUserScramCredentialsResponse", 50, "0", "0+", [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("results", Array(Struct("DescribeUserScramCredentialsResult", [
        F("user", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("credential_infos", Array(Struct("CredentialInfo", [
            F("mechanism", INT8),  # 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512
            F("iterations", INT32),
        ]))),
    ]))),
])
