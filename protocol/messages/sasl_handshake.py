"""SaslHandshake (key 17): pick a SASL mechanism before authenticating.

v0: the SASL tokens that follow travel as raw size-prefixed frames (no Kafka
header); v1: they travel inside SaslAuthenticate requests.
"""
from cohort.protocol.schema import F, Array, message, INT16, STRING

SaslHandshakeRequest = message("SaslHandshakeRequest", 17, "0-1", "none", [
    F("mechanism", STRING),
])

SaslHandshakeResponse = message("SaslHandshakeResponse", 17, "0-1", "none", [
    F("error_code", INT16),
    F("mechanisms", Array(STRING)),  # the mechanisms this listener enables
])
