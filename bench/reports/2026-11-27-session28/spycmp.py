"""spycmp.py RAW_A US_PER_REQ_A RAW_B US_PER_REQ_B: self time per function in microseconds per request, A vs B."""
import sys, collections
def load(path, us):
    c = collections.Counter(); total = 0
    for line in open(path):
        stack, _, n = line.rstrip().rpartition(" ")
        if "thread_run" in stack or "Thread._bootstrap" in stack: continue
        n = int(n); total += n
        leaf = stack.split(";")[-1]
        name = leaf.split(" (")[0]
        where = leaf.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] if " (" in leaf else ""
        if "libc" in where or "vdso" in where: name = name if not name.startswith("0x") else "libc?"
        c[(name, where)] += n
    return {k: v / total * us for k, v in c.items()}
a = load(sys.argv[1], float(sys.argv[2])); b = load(sys.argv[3], float(sys.argv[4]))
byfile = collections.defaultdict(lambda: [0.0, 0.0])
for k, v in a.items(): byfile[k[1]][0] += v
for k, v in b.items(): byfile[k[1]][1] += v
print("per file (us/request): A B")
for f, (x, y) in sorted(byfile.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:25]:
    print(f"  {x:6.2f} {y:6.2f} {x-y:+6.2f}  {f}")
keys = set(a) | set(b)
print("per function, largest differences:")
for k in sorted(keys, key=lambda k: -abs(a.get(k, 0) - b.get(k, 0)))[:30]:
    print(f"  {a.get(k,0):6.2f} {b.get(k,0):6.2f} {a.get(k,0)-b.get(k,0):+6.2f}  {k[0]} ({k[1]})")
