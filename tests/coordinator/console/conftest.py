"""The console tests' browser fixture (shared with the cluster console test): see `console_browser`."""
from console_browser import browser  # noqa: F401
