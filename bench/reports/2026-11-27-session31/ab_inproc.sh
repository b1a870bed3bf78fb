#!/bin/bash
# [WORKLOAD=commit|fetch|heartbeat] ab_inproc.sh N PY_A WHICH_A PY_B WHICH_B: server CPU per request of two cores, in process
# (../2026-11-27-session28/inproc.py), alternating A B N times, 3 samples per run; prints each side's
# median and samples. WHICH is main (cohort.coordinator.node) or base (the pre-redesign core).
# e.g. ab_inproc.sh 5 /work/main/.venv/bin/python main /work/baseline/.venv/bin/python base
cd "$(dirname "$0")/../2026-11-27-session28"
for i in $(seq "$1"); do
  "$2" inproc.py "$3" ${WORKLOAD:-commit} --seconds 1.5 2>/dev/null | grep cpu | sed 's/^[a-z]*/A/'
  "$4" inproc.py "$5" ${WORKLOAD:-commit} --seconds 1.5 2>/dev/null | grep cpu | sed 's/^[a-z]*/B/'
done | awk '{print $1, $3}' | sort -k1,1 -k2n |
  awk '{a[$1]=a[$1]" "$2; n[$1]++; v[$1,n[$1]]=$2} END {for (k in a) print k, "median", v[k,int((n[k]+1)/2)], "us:", a[k]}'
