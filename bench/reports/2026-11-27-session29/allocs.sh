#!/bin/bash
# allocs.sh PY main|base: PyObject_Malloc and _PyObject_GC_New calls per commit request (uprobes; the difference of
# a 4 s and a 1 s inproc run). Once: perf probe -x $(python's libpython3.11.so) --add PyObject_Malloc --add _PyObject_GC_New
py=$1; which=$2
cd /work/main/bench/reports/2026-11-27-session28
for s in 1 4; do
  perf stat -x, -e probe_libpython3:PyObject_Malloc,probe_libpython3:_PyObject_GC_New -o /tmp/perf_$s.txt -- $py inproc.py $which commit --seconds $s > /tmp/inproc_$s.txt 2>&1
done
python3 - <<'PY'
def counts(s):
    c = {}
    for line in open(f'/tmp/perf_{s}.txt'):
        parts = line.split(',')
        if len(parts) > 2 and 'probe' in parts[2]: c[parts[2].split(':')[1]] = int(parts[0])
    t = int([l for l in open(f'/tmp/inproc_{s}.txt') if l.startswith('TOTAL')][0].split()[1])
    return c, t
(a, ta), (b, tb) = counts(1), counts(4)
for k in a: print(k, round((b[k] - a[k]) / (tb - ta), 2), "per request")
PY
