"""Hypothesis settings for the codec suite: reproducible and bounded, so CI never flakes."""
from hypothesis import HealthCheck, settings

settings.register_profile(
    "protocol",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("protocol")
