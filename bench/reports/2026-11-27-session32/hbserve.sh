#!/bin/bash
# hbserve.sh main|base [spy-out]: cohort serve + heartbeat max-rate 5000 members; server CPU during the measured window
which=$1; spy=$2; port=19096
exe=/work/main/.venv/bin/cohort; [ $which = base ] && exe=/work/baseline/.venv/bin/cohort
dd=$(mktemp -d)
nice -n ${SNICE:-0} $exe serve --listen 127.0.0.1:$port --data-dir $dd/data --group.initial.rebalance.delay.ms 0 --offsets.flush.policy always --log-level WARNING --metrics 127.0.0.1:19097 > $dd/srv.log 2>&1 &
pid=$!
for i in $(seq 200); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
d=$(mktemp -d)
(cd /work/main && nice -n -10 .venv/bin/python -m bench run --workloads heartbeat --variants max-rate --target 127.0.0.1:$port --set duration_s=${DUR:-20} --set heartbeat_members=5000 --set heartbeat_groups=500 --out $d > $d/log 2>&1; echo END >> $d/log) &
# measured window: sample CPU at t=12s and t=+6s
sleep 12
c0=$(awk '{print ($14+$15)}' /proc/$pid/stat)
if [ -n "$spy" ]; then /work/main/.venv/bin/py-spy record -p $pid -r 200 -d 6 -f raw -o $spy --native >/dev/null 2>&1; else sleep 6; fi
c1=$(awk '{print ($14+$15)}' /proc/$pid/stat)
while ! grep -q END $d/log; do sleep 1; done
echo "$which $(grep -o 'throughput.*' $d/log | head -1) cpu6s=$(( c1 - c0 ))"
kill $pid; wait $pid 2>/dev/null; rm -rf $d $dd
