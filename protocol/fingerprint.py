"""What the build's generated codecs were made from, as one hash: the declarations (`messages/`), the
schema and the generator. `schema` compares it with the generated module's at import time, `codegen`
writes it into that module."""
from __future__ import annotations

import hashlib
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def declarations_fingerprint() -> str:
    """A hash of what the generated codecs are made from: the declarations, the schema, the generator."""
    digest = hashlib.sha256()
    for path in [_HERE / "schema.py", _HERE / "codegen.py", *sorted((_HERE / "messages").glob("*.py"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
