"""attrs.py: the instance-dict size of every object of ours in an in-process server after a short load.

    python attrs.py main|base [commit|heartbeat]     (run with the venv of the core to inspect)

CPython 3.11 keeps up to 30 attributes inline (shared keys); an object with more has a plain dict and
its attribute loads and method calls are not specialized. Prints the largest per class (slotted
classes have no dict and do not appear).
"""
import atexit
import gc
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INPROC = os.path.join(HERE, "..", "2026-11-27-session28", "inproc.py")


def report() -> None:
    seen: dict[str, int] = {}
    for obj in gc.get_objects():
        cls = type(obj)
        if isinstance(obj, type) or not str(getattr(cls, "__module__", "")).startswith("cohort"):
            continue
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict):
            key = f"{cls.__module__}.{cls.__qualname__}"
            seen[key] = max(seen.get(key, 0), len(attributes))
    for key, n in sorted(seen.items(), key=lambda kv: -kv[1])[:15]:
        print(f"{n:4d} {key}")


atexit.register(report)
sys.argv = ["inproc.py", sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "commit", "--seconds", "0.3"]
os.chdir(os.path.dirname(INPROC))
exec(compile(open(INPROC).read(), INPROC, "exec"), {"__name__": "__main__"})
