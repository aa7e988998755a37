#!/usr/bin/env bash
# The device call for the fused qkv and split-K launch of one decode row (issue 15, session 56):
# gpu_model and gpu_engine (the fused launch against the oracle and against the two launches, bit
# for bit), compute-sanitizer on gpu_model's forward checks, then the B1 decode step of asynct-0.5b
# with the launch on and off (ASYNCT_QKV_SPLIT=0) in the same call, at 1K context and at 960
# (every timed step in the 1K width bucket, where the launch is taken). Built here:
# `scripts/device-build.sh`; device tool: command "bash verify/pending/qkv-split.sh", carry
# ["device-pack.tgz"]. SKIP="checks sanitize bench" leaves out those parts. Writes
# $OUT/summary.txt and $OUT/results.tgz.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/asynct-out}
mkdir -p "$OUT"
tar xzf device-pack.tgz
B=device-bin
R=/tmp/qkv-split-runs
rm -rf $R && mkdir -p $R
S=$OUT/summary.txt
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader), commit $(head -1 $B/COMMIT)" | tee $S
pack() { tar czf "$OUT/results.tgz" -C /tmp qkv-split-runs 2>/dev/null; }
skip() { [[ " ${SKIP:-} " == *" $1 "* ]]; }

if ! skip checks; then
  for t in gpu_model gpu_engine; do
    timeout 400 $B/$t > $R/$t.log 2>&1
    echo "$t rc=$?" >> $S
    grep -E "passed, .* failed|FAIL|one-row|one launch|one sequence" $R/$t.log >> $S
  done
  pack
fi
if ! skip sanitize; then
  for tool in memcheck racecheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 3 $B/gpu_model the_forward_agrees > $R/sanitize-$tool.log 2>&1
    echo "sanitize $tool rc=$?" >> $S
    tail -4 $R/sanitize-$tool.log >> $S
  done
  pack
fi
if ! skip bench; then
  for ctx in ${CONTEXTS:-960 1024}; do
    BUILDS=${BENCH_BUILDS:-"device-bin device-bin:ASYNCT_QKV_SPLIT=0"} STEP_BATCHES=${BATCHES:-1} BUILDS_PASSES=2 BUILDS_CONTEXT=$ctx \
      OUT=$R/bench-$ctx scripts/device-run.sh builds > $R/bench-$ctx.log 2>&1
    echo "bench context $ctx:" >> $S
    cat $R/bench-$ctx/builds-table.txt >> $S 2>/dev/null
  done
  pack
fi
# Each launch's time on a traced B1 step's path, the launch on and off.
if ! skip trace; then
  BUILDS=${TRACE_BUILDS:-"device-bin:ASYNCT_STEP_TRACE=1 device-bin:ASYNCT_QKV_SPLIT=0,ASYNCT_STEP_TRACE=1"} STEP_BATCHES=1 BUILDS_PASSES=1 \
    BUILDS_CONTEXT=960 OUT=$R/trace scripts/device-run.sh builds > $R/trace.log 2>&1
  cat /tmp/asynct-builds/*.log > $R/trace-runs.log
  grep -iE "trace|us a layer|on the path" /tmp/asynct-builds/*.log | head -40 >> $S
  pack
fi
