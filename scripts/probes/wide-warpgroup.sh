#!/usr/bin/env bash
# Session 36 probe (issue 15): the skinny warpgroup form's wide instantiation (decode rows past 64
# of gate/up in slabs of 128) against main's build, on one machine: gpu_gemm (its bits against
# the plain form), compute-sanitizer memcheck of gpu_gemm's sanitize check, gpu_engine and
# gpu_model, the decode step of both builds, ncu of one B128 step of the new build. Run after
# `tar xzf device-pack-w.tgz`; writes into $OUT.
set -u
O=/tmp/o M=/tmp/m05
mkdir -p $O
W=device-bin-wide
(timeout 90 $W/gpu_gemm; \
 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $W/gpu_gemm sanitize | tail -n 15; \
 timeout 90 $W/gpu_engine; timeout 90 $W/gpu_model) > $OUT/gpu-tests.txt 2>&1
OUT=$O BIN_DIR=$W BUILDS="device-bin-main device-bin-wide" STEP_BATCHES=1,64,96,128 timeout 240 scripts/device-run.sh builds \
  > $OUT/builds.txt 2>&1
cp $O/builds.json $O/builds-summary.txt $OUT/ 2>/dev/null
timeout 90 ncu --csv --log-file $O/ncu-wide-b128.csv --profile-from-start off --graph-profiling node \
  --metrics gpu__time_duration.sum --print-units base --clock-control none --cache-control none \
  $W/asynct bench --model $M --decode-batch 128 --context 1024 --profile-steps 1 > $O/ncu.log 2>&1
python3 scripts/step_profile.py $O/ncu-wide-b128.csv --steps 1 > $OUT/profile-wide-b128.txt 2>&1
grep -h "^test\|passed\|ERROR SUMMARY" $OUT/gpu-tests.txt
cat $OUT/builds-summary.txt | cut -c1-400
head -14 $OUT/profile-wide-b128.txt
