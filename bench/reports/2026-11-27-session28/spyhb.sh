#!/bin/bash
# spyhb.sh main|base OUT: py-spy --native of the plain node during heartbeat max-rate with 5000 members
which=$1; out=$2; port=19094
py=/work/main/.venv/bin/python; [ $which = base ] && py=/work/baseline/.venv/bin/python
$py plainserve.py $which $port --metrics --heap >/dev/null 2>&1 &
pid=$!
for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
d=$(mktemp -d)
(cd /work/main && nice -n -10 .venv/bin/python -m bench run --workloads heartbeat --variants max-rate --target 127.0.0.1:$port --set duration_s=30 --set heartbeat_members=5000 --set heartbeat_groups=500 --out $d > $d/log 2>&1; echo END >> $d/log) &
t0=$(date +%s)
# wait until the generator's CPU shows the closed loop started: poll the server's request counter growth via /proc
sleep 22
/work/main/.venv/bin/py-spy record -p $pid -r 250 -d 6 -f raw -o $out ${SPYFLAGS:---native} >/dev/null 2>&1
while ! grep -q END $d/log; do sleep 1; done
grep -i "throughput" $d/log | head -3
kill $pid; rm -rf $d
