#!/bin/bash
# threads.sh BIN PORT MPORT: the daemon's CPU per thread (and its fsync helpers') over a 6 s commit run of the
# bench's generator. PIN=1: the event loop's thread alone on CPU 1, everything else on CPU 0.
bin=$1; port=$2; mport=$3
d=$(mktemp -d /tmp/thr.XXXX)
$bin serve --data-dir $d --listeners 127.0.0.1:$port --metrics 127.0.0.1:$mport >$d/log 2>&1 &
pid=$!
for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
snap() { for t in /proc/$pid/task/*; do echo "$(cat $t/comm) $(awk '{print $14, $15}' $t/stat)"; done; for c in $(pgrep -P $pid); do echo "child$c $(awk '{print $14, $15}' /proc/$c/stat)"; done; }
if [ -n "$PIN" ]; then
  for t in /proc/$pid/task/*; do tid=${t##*/}; if [ $tid = $pid ]; then taskset -pc 1 $tid >/dev/null; else taskset -pc 0 $tid >/dev/null; fi; done
  for c in $(pgrep -P $pid); do for t in /proc/$c/task/*; do taskset -pc 0 ${t##*/} >/dev/null; done; done
  pin0="taskset -c 0"
fi
snap > $d/a
cd /work/main && $pin0 nice -n -10 .venv/bin/python -m bench run --workloads commit --variants simple-1p --target 127.0.0.1:$port --set duration_s=6 --out $d/out >/dev/null 2>&1
snap > $d/b
ops=$(python3 -c "import json;r=json.load(open('$d/out/results.json'))['results'];print(sum(x['operations'] for x in r))")
echo "ops=$ops"
paste $d/a $d/b | awk '{u=$5-$2; s=$6-$3; if (u+s>0) print $1, "utime", u, "stime", s}'
kill $pid; wait $pid 2>/dev/null; rm -rf $d
