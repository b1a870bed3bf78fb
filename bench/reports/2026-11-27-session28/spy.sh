#!/bin/bash
# spy.sh COHORT_BIN PORT METRICS_PORT WORKLOAD VARIANT OUT: py-spy (raw, DUR s, default 5) of one daemon under a bench run.
bin=$1; port=$2; mport=$3; wl=$4; variant=$5; out=$6
d=$(mktemp -d /tmp/spy.XXXX)
${SERVE:-$bin serve --data-dir $d --listeners 127.0.0.1:$port --metrics 127.0.0.1:$mport} >$d/log 2>&1 &
pid=$!
for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
cd /work/main && { nice -n -10 .venv/bin/python -m bench run --workloads $wl --variants $variant --target 127.0.0.1:$port --set duration_s=$(( ${DUR:-5} + 3 )) --out $d/out >/dev/null 2>&1 & }
gen=$!
sleep 4
/work/main/.venv/bin/py-spy record -p $pid -r 250 -d ${DUR:-5} -f raw -o $out ${SPYFLAGS:---nonblocking} >/dev/null 2>&1
while kill -0 $gen 2>/dev/null; do sleep 0.5; done
kill $pid; wait $pid 2>/dev/null
rm -rf $d
