"""opcount.py: Python bytecodes executed per commit request, per function or per source line (exact, not sampled).

    python opcount.py main|base [--lines]       (run with the venv of the core to count)

Runs `../2026-11-27-session28/inproc.py WHICH commit` twice under `sys.settrace` opcode events (0.5 s and
1.5 s per measured repetition) and divides the difference of the counts by the difference of the requests
served, so start-up and fixtures cancel out. Client-side work of inproc.py is counted too (identical in both
cores). Prints the total and the largest entries.
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INPROC = os.path.join(HERE, "..", "2026-11-27-session28", "inproc.py")


def record(which: str, seconds: str, by_line: bool, out: str) -> None:
    counts = collections.Counter()

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        code = frame.f_code
        name = code.co_filename.rsplit("/", 1)[-1]
        key = None if by_line else f"{code.co_name} ({name})"

        def local(frame, event, arg):
            if event == "opcode":
                counts[key or f"{name}:{frame.f_lineno}"] += 1
            return local
        return local

    sys.argv = ["inproc.py", which, "commit", "--seconds", seconds]
    os.chdir(os.path.dirname(INPROC))
    import atexit

    def dump() -> None:
        sys.settrace(None)
        json.dump(dict(counts), open(out, "w"))
    atexit.register(dump)
    sys.settrace(tracer)
    exec(compile(open(INPROC).read(), INPROC, "exec"), {"__name__": "__main__"})


def main() -> None:
    if sys.argv[1] == "--record":
        record(sys.argv[2], sys.argv[3], sys.argv[4] == "lines", sys.argv[5])
        return
    which, by_line = sys.argv[1], "--lines" in sys.argv
    runs = []
    for seconds in ("0.5", "1.5"):
        out = tempfile.mktemp(suffix=".json")
        done = subprocess.run([sys.executable, __file__, "--record", which, seconds, "lines" if by_line else "functions",
                               out], capture_output=True, text=True, check=True)
        total = int([line for line in done.stdout.splitlines() if line.startswith("TOTAL")][0].split()[1])
        runs.append((json.load(open(out)), total))
        os.unlink(out)
    (a, ta), (b, tb) = runs
    per = {k: (b.get(k, 0) - a.get(k, 0)) / (tb - ta) for k in set(a) | set(b) if not k.endswith(":None")}
    print(f"{which}: {sum(per.values()):.1f} bytecodes per request")
    for key, n in sorted(per.items(), key=lambda kv: -kv[1])[:80]:
        if n >= 1:
            print(f"{n:7.1f} {key}")


if __name__ == "__main__":
    main()
