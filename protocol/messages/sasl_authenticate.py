"""SaslAuthenticate (key 36): one SASL token each way, after a v1 SaslHandshake."""
from cohort.protocol.schema import F, message, INT16, INT64, STRING, BYTES

SaslAuthenticateRequest = message("SaslAuthenticateRequest", 36, "0-2", "2+", [
    F("auth_bytes", BYTES),
])

SaslAuthenticateResponse = message("SaslAuthenticateResponse", 36, "0-2", "2+", [
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("auth_bytes", BYTES),
    # v1+: 0 = the session never has to re-authenticate (KIP-368)
    F("session_lifetime_ms", INT64, "1+", default=0),
])
