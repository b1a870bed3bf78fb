"""spyagg.py RAW [N]: self and inclusive sample shares per function from a py-spy raw (collapsed) file."""
import sys, collections
self_, incl = collections.Counter(), collections.Counter()
total = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    if "thread_run" in stack or "Thread._bootstrap" in stack: continue
    n = int(n); total += n
    frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")" if " (" in f else f for f in stack.split(";")]
    self_[frames[-1]] += n
    for f in set(frames):
        incl[f] += n
N = int(sys.argv[2]) if len(sys.argv) > 2 else 30
print("total", total)
print("--- self")
for f, n in self_.most_common(N): print(f"{100*n/total:5.1f}% {f}")
print("--- inclusive")
for f, n in incl.most_common(N): print(f"{100*n/total:5.1f}% {f}")
