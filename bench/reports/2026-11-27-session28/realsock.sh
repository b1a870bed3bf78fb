#!/bin/bash
# realsock.sh COHORT_BIN PORT METRICS_PORT WORKLOAD VARIANT: one daemon, one bench run against it, and the
# server's CPU, read/write syscalls and requests over the run (from /proc/PID/{stat,io}).
bin=$1; port=$2; mport=$3; wl=$4; variant=$5
d=$(mktemp -d /tmp/realsock.XXXX)
${SERVE:-$bin serve --data-dir $d --listeners 127.0.0.1:$port --metrics 127.0.0.1:$mport} >${LOG:-$d/log} 2>&1 &
pid=$!
for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
snap() { awk '{print $14+$15}' /proc/$pid/stat; awk '/syscr|syscw/{print $2}' /proc/$pid/io; }
a=($(snap))
cd /work/main && nice -n -10 .venv/bin/python -m bench run --workloads $wl --variants $variant --target 127.0.0.1:$port --set duration_s=6 $EXTRA --out $d/out >/dev/null 2>&1
b=($(snap))
ops=$(python3 -c "import json;r=json.load(open('$d/out/results.json'))['results'];print(sum(x['operations'] for x in r), r[0]['throughput_per_s'], r[0]['generator']['cpu_seconds'])")
set -- $ops
kill $pid; wait $pid 2>/dev/null
reqs=$(( 1 ))
echo "$bin $wl: ops=$1 tput=$2 gen_cpu=$3 server_cpu_ticks=$(( ${b[0]}-${a[0]} )) syscr=$(( ${b[1]}-${a[1]} )) syscw=$(( ${b[2]}-${a[2]} ))"
rm -rf $d
