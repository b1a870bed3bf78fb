"""time_to_listen.py COHORT_BIN...: spawn `cohort serve` on an empty data dir, time until it accepts TCP (N rounds, alternating)."""
import os, socket, subprocess, sys, tempfile, time, statistics
exes = sys.argv[1:]
env = dict(os.environ); env.pop("PYTHONDONTWRITEBYTECODE", None)
res = {e: [] for e in exes}
def free():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
for r in range(int(os.environ.get("N", "7"))):
    for e in exes:
        d = tempfile.mkdtemp(); p, m = free(), free()
        t0 = time.perf_counter()
        proc = subprocess.Popen([e, "serve", "--data-dir", d, "--listen", f"127.0.0.1:{p}", "--metrics", f"127.0.0.1:{m}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            try:
                socket.create_connection(("127.0.0.1", p), timeout=1).close(); break
            except OSError:
                if time.perf_counter() - t0 > 20: raise
                time.sleep(0.002)
        res[e].append(time.perf_counter() - t0)
        proc.terminate(); proc.wait()
for e, v in res.items():
    print(f"{statistics.median(v)*1000:7.1f} ms  min {min(v)*1000:6.1f}  {e}")
