"""Kafka wire protocol, sans-IO: bytes in, typed messages out, and back.

Nothing in this package touches a socket or an event loop; the server and the
client both drive it.
"""
