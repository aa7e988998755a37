#!/usr/bin/env bash
# Session 36 probe (issue 15): the decode step with gate/up's decode rows on cuBLASLt at several
# reference row counts, ncu of one B1 and one B128 step with and without, and the engine and
# model checks with gate/up and down on cuBLASLt. Run on the device after
# `tar xzf device-pack.tgz`; writes into $OUT.
set -u
B=device-bin O=/tmp/o M=/tmp/m05
mkdir -p $O
OUT=$O BIN_DIR=$B VARIANTS="pdl1-fuse lt-gate_up_at1 lt-gate_up_at8 lt-gate_up_at16 lt-gate_up lt-gate_up_at128 pdl1-fuse" \
  STEP_BATCHES=1,8,32,128 timeout 300 scripts/device-run.sh variants > $OUT/variants.txt 2>&1
(cd $O && tail -n +1 bench-decode-*.log) > $OUT/variant-logs.txt 2>&1
tar czf $OUT/variant-json.tgz -C $O $(cd $O && ls bench-decode-*.json)
for cfg in base lt; do
  env=(); [ $cfg = lt ] && env=(ASYNCT_DECODE_CUBLASLT=gate_up)
  for b in 1 128; do
    env "${env[@]}" timeout 120 ncu --csv --log-file $O/ncu-$cfg-b$b.csv --profile-from-start off --graph-profiling node \
      --metrics gpu__time_duration.sum --print-units base --clock-control none --cache-control none \
      $B/asynct bench --model $M --decode-batch $b --context 1024 --profile-steps 1 > $O/ncu-$cfg-b$b.log 2>&1
    echo "== $cfg B$b" >> $OUT/profiles.txt
    python3 scripts/step_profile.py $O/ncu-$cfg-b$b.csv --steps 1 >> $OUT/profiles.txt 2>&1
  done
done
(ASYNCT_DECODE_CUBLASLT=gate_up,down:split timeout 120 $B/gpu_engine; \
 ASYNCT_DECODE_CUBLASLT=gate_up,down:split timeout 90 $B/gpu_model) > $OUT/gpu-tests.txt 2>&1
grep -h "^test\|passed" $OUT/gpu-tests.txt
grep -h "^==\|^decode B" $OUT/variants.txt | cut -c1-40
