"""Kafka wire protocol, sans-IO: bytes in, typed messages out, and back.

Nothing in this package touches a socket or an event loop; the server and the
client both drive it.
"""
from cohort.protocol.compiled import install_pure_python_switch

install_pure_python_switch()  # before any compiled module is imported (protocol/compiled.py)
