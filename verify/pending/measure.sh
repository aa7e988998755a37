#!/usr/bin/env bash
# The device call that measures what waits here, in order of what it settles (a call cut short
# still returns the summary written so far): scripts/probes/handoff.cu (issue 15's hand-off
# probe), then the two prefill patches (issue 18) beside main. Built here first:
#   git switch -c exp-k-table main && git am verify/pending/exp-prefill-table-ahead.patch
#   git switch -c exp-k-both && git am verify/pending/exp-prefill-lookup-once.patch && git switch main
#   scripts/device-build-refs.sh a=exp-k-table:gpu_prefill b=exp-k-both:gpu_prefill t=main:gpu_prefill
# then the device tool: command "bash verify/pending/measure.sh", carry ["device-pack.tgz"].
# a - t is the table-ahead patch, b - a the lookup-once patch. On an H200 it also times main's
# decode step beside the torch.compile anchor and prefill_heavy_b16 (issues 15 and 18 state
# their goals on the H200). Writes $OUT/summary.txt and $OUT/results.tgz.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/asynct-out}
mkdir -p "$OUT"
tar xzf device-pack.tgz
R=/tmp/pending-runs
rm -rf $R
mkdir -p $R
S=$OUT/summary.txt
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $gpu" | tee $S
pack() { tar czf "$OUT/results.tgz" -C /tmp pending-runs 2>/dev/null; }

t0=$SECONDS
if nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o /tmp/handoff scripts/probes/handoff.cu \
  > $R/handoff-build.log 2>&1; then
  { timeout 60 /tmp/handoff; timeout 60 /tmp/handoff; } > $R/handoff.txt 2>&1
  echo "handoff rc=$? $((SECONDS - t0)) s" >> $S
  cat $R/handoff.txt >> $S
else
  tail -20 $R/handoff-build.log >> $S
fi

t0=$SECONDS
BIN_DIR=device-bin-b OUT=$R/b scripts/device-run.sh tests > $R/b-tests.log 2>&1
echo "b gpu_prefill rc=$? $((SECONDS - t0)) s" >> $S
grep -E "test result|passed|failed" $R/b-tests.log | tail -10 >> $S

t0=$SECONDS
BUILDS="device-bin-a device-bin-b device-bin-t" PREFILL_BUILDS_PASSES=2 PREFILL_NCU_POINT=B16_T1024 OUT=$R/pb \
  scripts/device-run.sh prefill-builds > $R/pb.log 2>&1
echo "prefill-builds rc=$? $((SECONDS - t0)) s" >> $S
cat $R/pb/prefill-builds-summary.txt $R/pb/prefill-builds-ncu.txt >> $S 2>/dev/null
for n in b t; do
  ncu --import /tmp/asynct-prefill-builds/ncu-$n.ncu-rep --page details > $R/ncu-$n-details.txt 2>&1
done
pack

t0=$SECONDS
BIN_DIR=device-bin-b OUT=$R/bs scripts/device-run.sh sanitize > $R/b-sanitize.log 2>&1
echo "b sanitize rc=$? $((SECONDS - t0)) s" >> $S
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" $R/b-sanitize.log | tail -10 >> $S
for p in B256_T64 B64_T256; do
  BUILDS="device-bin-a device-bin-b device-bin-t" PREFILL_BUILDS_PASSES=2 PREFILL_BUILDS_POINT=$p OUT=$R/pb-$p \
    scripts/device-run.sh prefill-builds > $R/pb-$p.log 2>&1
  cat $R/pb-$p/prefill-builds-summary.txt >> $S 2>/dev/null
done
python3 scripts/attention_anchor.py $R/anchor.json --prefill > $R/anchor.log 2>&1
grep -iE "cudnn|B[0-9]+_T" $R/anchor.log | head -20 >> $S
# The lookup-once patch changes the MMA path's lookup too.
BUILDS="device-bin-b device-bin-t" PREFILL_BUILDS_PASSES=2 PREFILL_BUILDS_PATH=prefill-mma OUT=$R/mma \
  scripts/device-run.sh prefill-builds > $R/mma.log 2>&1
echo "== the MMA path" >> $S
cat $R/mma/prefill-builds-summary.txt >> $S 2>/dev/null
pack

if [[ $gpu == *H200* ]]; then
  t0=$SECONDS
  BIN_DIR=device-bin-t STEP_PARTS="anchor graph" OUT=$R/step scripts/device-run.sh step > $R/step.log 2>&1
  echo "step rc=$? $((SECONDS - t0)) s" >> $S
  tail -25 $R/step.log >> $S
  BIN_DIR=device-bin-b CHUNK_VARIANTS="unfused unfused" OUT=$R/chunks scripts/device-run.sh chunks > $R/chunks.log 2>&1
  cat $R/chunks/chunks-summary.txt >> $S 2>/dev/null
  pack
fi
