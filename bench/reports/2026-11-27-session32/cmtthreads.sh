#!/bin/bash
# cmtthreads.sh main|base|wt [PERF_OUT]: cohort serve + commit simple-1p; CPU ticks per thread & children over a 6 s window,
# or with PERF_OUT the loop thread's system calls (perf trace -s over 5 s) instead
which=$1; perf_out=$2; port=19098
exe=/work/main/.venv/bin/cohort; [ $which = wt ] && exe=/tmp/wt/.venv/bin/cohort; [ $which = base ] && exe=/work/baseline/.venv/bin/cohort
dd=$(mktemp -d)
nice -n -10 $exe serve --listen 127.0.0.1:$port --data-dir $dd/data --group.initial.rebalance.delay.ms 0 --offsets.flush.policy always --log-level WARNING --metrics 127.0.0.1:19099 > $dd/srv.log 2>&1 &
pid=$!
for i in $(seq 200); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
d=$(mktemp -d)
(cd /work/main && nice -n -10 .venv/bin/python -m bench run --workloads commit --variants simple-1p --target 127.0.0.1:$port --set duration_s=12 --out $d > $d/log 2>&1; echo END >> $d/log) &
snap() { for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm | tr ' ' _) $(awk '{print $14+$15}' $t/stat)"; done; for c in $(pgrep -P $pid); do echo "child$c $(cat /proc/$c/comm) $(awk '{print $14+$15}' /proc/$c/stat)"; done; }
if [ -n "$perf_out" ]; then sleep 4; perf trace -s -t $pid -o $perf_out -- sleep 5 >/dev/null 2>&1
else sleep 5; snap > $dd/a; sleep 6; snap > $dd/b; fi
while ! grep -q END $d/log; do sleep 1; done
echo "$which $(grep -o 'throughput.*' $d/log | head -1)"
[ -z "$perf_out" ] && join $dd/a $dd/b | awk '{d=$5-$3; if (d>0) print "   ", $2, d}'
kill $pid; wait $pid 2>/dev/null; rm -rf $d $dd
