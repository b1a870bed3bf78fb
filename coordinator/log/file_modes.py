"""Who may read the data dir: its owner only (directories 0700, files 0600), whatever the umask.

The data dir holds SCRAM credentials (partition 0's records) beside everyone's offsets; a umask can only
take permissions away from these modes, never add any.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def make_private_dir(path: Path, tighten: bool = False) -> None:
    """Create `path` (and missing parents) as a 0700 directory; `tighten`: also take group and other
    permissions off one that exists (the data dir itself, made by an earlier version or by hand)."""
    path = Path(path)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if tighten and stat.S_IMODE(path.stat().st_mode) & 0o077:
        path.chmod(DIR_MODE)


def private_opener(path: str, flags: int) -> int:
    """An `opener` for `open()` creating files 0600."""
    return os.open(path, flags, FILE_MODE)
