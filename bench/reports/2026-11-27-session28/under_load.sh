#!/bin/bash
# under_load.sh strace|perfstat|perfrec main|base PORT: the plain node under 8 s of the fetch bench, observed
# for 3 s from the 4th: syscall counts (strace -c), software counters (perf stat) or a profile (perf record,
# to /tmp/perf-<main|base>.data).
tool=$1; which=$2; port=$3
py=/work/main/.venv/bin/python; [ $which = base ] && py=/work/baseline/.venv/bin/python
$py plainserve.py $which $port --metrics >/dev/null 2>&1 &
pid=$!
for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
d=$(mktemp -d)
(cd /work/main && nice -n -10 .venv/bin/python -m bench run --workloads fetch --variants fetch-1p --target 127.0.0.1:$port --set duration_s=8 --out $d >/dev/null 2>&1 &)
sleep 4
case $tool in
  strace) timeout -s INT 3 strace -c -f -p $pid 2>&1 | head -25 ;;
  perfstat) perf stat -e task-clock,context-switches,page-faults -p $pid -- sleep 3 2>&1 | tail -8 ;;
  perfrec) perf record -e cpu-clock -F 2000 -o /tmp/perf-$which.data -p $pid -- sleep 3 >/dev/null 2>&1 ;;
esac
sleep 6; kill $pid; rm -rf $d
