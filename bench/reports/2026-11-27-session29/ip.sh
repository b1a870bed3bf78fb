#!/bin/bash
# ip.sh N: N alternating inproc.py commit runs of /work/main and /work/baseline (3 measurements each); medians of
# the CPU per request and their ratio
cd /work/main/bench/reports/2026-11-27-session28
rm -f /tmp/ip.out
for i in $(seq $1); do
  /work/main/.venv/bin/python inproc.py main commit --seconds 3 2>&1 | grep cpu | sed 's/^/M /' >> /tmp/ip.out
  /work/baseline/.venv/bin/python inproc.py base commit --seconds 3 2>&1 | grep cpu | sed 's/^/B /' >> /tmp/ip.out
done
python3 -c "
import statistics
rows=[l.split() for l in open('/tmp/ip.out')]
m=[float(r[3]) for r in rows if r[0]=='M']; b=[float(r[3]) for r in rows if r[0]=='B']
print('main %.2f base %.2f ratio(base/main) %.3f  n=%d' % (statistics.median(m), statistics.median(b), statistics.median(b)/statistics.median(m), len(m)))
"
