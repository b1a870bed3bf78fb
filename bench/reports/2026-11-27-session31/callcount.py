"""callcount.py: Python and C function calls per commit request, per callee (exact, not sampled).

    python callcount.py main|base       (run with the venv of the core to count)

Like ../2026-11-27-session29/opcount.py, but counts `sys.setprofile` call events: a Python call costs a
frame, a C call (builtins, methods of C types) an argument tuple or vectorcall. Runs
`../2026-11-27-session28/inproc.py WHICH commit` for 0.5 s and 1.5 s per repetition and divides the
difference of the counts by the difference of the requests served.
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INPROC = os.path.join(HERE, "..", "2026-11-27-session28", "inproc.py")


def record(which: str, seconds: str, out: str) -> None:
    counts = collections.Counter()

    def profiler(frame, event, arg):
        if event == "call":
            code = frame.f_code
            counts[f"py {code.co_name} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})"] += 1
        elif event == "c_call":
            counts[f"c  {getattr(arg, '__qualname__', arg)}"] += 1

    sys.argv = ["inproc.py", which, "commit", "--seconds", seconds]
    os.chdir(os.path.dirname(INPROC))
    import atexit
    import threading

    def dump() -> None:
        sys.setprofile(None)
        json.dump(dict(counts), open(out, "w"))
    atexit.register(dump)
    threading.setprofile(profiler)
    sys.setprofile(profiler)
    exec(compile(open(INPROC).read(), INPROC, "exec"), {"__name__": "__main__"})


def main() -> None:
    if sys.argv[1] == "--record":
        record(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    which = sys.argv[1]
    runs = []
    for seconds in ("0.5", "1.5"):
        out = tempfile.mktemp(suffix=".json")
        done = subprocess.run([sys.executable, __file__, "--record", which, seconds, out],
                              capture_output=True, text=True, check=True)
        total = int([line for line in done.stdout.splitlines() if line.startswith("TOTAL")][0].split()[1])
        runs.append((json.load(open(out)), total))
        os.unlink(out)
    (a, ta), (b, tb) = runs
    per = {k: (b.get(k, 0) - a.get(k, 0)) / (tb - ta) for k in set(a) | set(b)}
    py = sum(v for k, v in per.items() if k.startswith("py"))
    c = sum(v for k, v in per.items() if k.startswith("c "))
    print(f"{which}: {py:.1f} Python calls, {c:.1f} C calls per request")
    for key, n in sorted(per.items(), key=lambda kv: -kv[1]):
        if n >= 0.05:
            print(f"{n:7.2f} {key}")


if __name__ == "__main__":
    main()
