#!/usr/bin/env bash
# fsdp-ckpt end to end: info, verify (clean and corrupted, alone and under mpiexec), diff,
# export to safetensors read back by an independent reader (check_safetensors.py) in fp32, bf16
# and fp16, import back and compare, one-line errors with a non-zero exit, and the usage on
# stdout with exit 0 for -h/--help, of the tool and of every command.
# Usage: test_ckpt_tool.sh <fsdp-ckpt> <mpiexec> <python3> <h5dump> <checkpoint> <other checkpoint>
#        <reference dir> <scratch dir> <tests source dir>
set -u
tool=$1 mpiexec=$2 py=$3 h5dump=$4 ckpt=$5 other=$6 ref=$7 dir=$8 src=$9
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }
mkdir -p "$dir"

out=$("$tool" info "$ckpt"); rc=$?
check "info" '[ $rc -eq 0 ] && grep -q "embed.weight *float32 *\[64, 33\]" <<<"$out" && grep -q "step = 3" <<<"$out" && grep -q "adamw" <<<"$out"'
out=$("$tool" verify "$ckpt"); rc=$?
check "verify clean (and the index agrees)" '[ $rc -eq 0 ] && grep -q "^OK: 19 datasets" <<<"$out" && ! grep -q "^index" <<<"$out"'
# stdout and stderr apart: mpiexec forwards them through separate pipes, in no fixed order.
out=$($mpiexec -n 2 "$tool" verify "$ckpt" --progress 2>"$dir/progress.txt"); rc=$?
check "verify under mpiexec with progress" '[ $rc -eq 0 ] && grep -q "^OK" <<<"$out" && grep -q "100%" "$dir/progress.txt"'

# One flipped byte inside /model/layer0.weight (its offset from h5dump's storage layout).
cp "$ckpt" "$dir/corrupt.h5"
offset=$("$h5dump" -p -H -d /model/layer0.weight "$ckpt" | sed -n 's/.*OFFSET \([0-9]*\).*/\1/p' | head -1)
"$py" -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])+5); b=f.read(1); f.seek(-1,1); f.write(bytes([b[0]^1]))" "$dir/corrupt.h5" "$offset"
out=$($mpiexec -n 2 "$tool" verify "$dir/corrupt.h5"); rc=$?
check "verify finds a flipped byte" '[ $rc -eq 1 ] && grep -q "checksum mismatch: /model/layer0.weight" <<<"$out"'
out=$("$tool" export "$dir/corrupt.h5" --to "$dir/corrupt.safetensors" 2>&1); rc=$?
check "export refuses a corrupt checkpoint" '[ $rc -eq 2 ] && grep -q "corrupt" <<<"$out" && [ ! -e "$dir/corrupt.safetensors" ]'

# h5repack copies /index but moves the data: readers must notice and read the datasets instead.
h5repack=$(dirname "$h5dump")/h5repack
if [ -x "$h5repack" ]; then
  "$h5repack" "$ckpt" "$dir/repacked.h5"
  out=$("$tool" verify "$dir/repacked.h5"); rc=$?
  check "verify of an h5repack copy notices the stale index" '[ $rc -eq 0 ] && grep -q "^index: absent or out of date" <<<"$out" && grep -q "^OK: 19 datasets" <<<"$out"'
  out=$("$tool" diff "$ckpt" "$dir/repacked.h5"); rc=$?
  check "an h5repack copy reads as identical" '[ $rc -eq 0 ] && grep -q "identical" <<<"$out"'
fi

out=$("$tool" diff "$ckpt" "$ckpt"); rc=$?
check "diff identical" '[ $rc -eq 0 ] && grep -q "identical" <<<"$out"'
out=$("$tool" diff "$ckpt" "$other"); rc=$?
check "diff different" '[ $rc -eq 1 ] && grep -q "^/model/embed.weight" <<<"$out" && grep -q "differ" <<<"$out"'
# Checkpoints whose parameters are equal but whose optimizer state or metadata differ are not
# identical: each difference is named.
cp "$ckpt" "$dir/opt-state.h5"  # one bit flipped in the first optimizer state dataset
opt_ds=$("$h5dump" -n "$ckpt" | awk '$1 == "dataset" && $2 ~ /^\/optimizers\/0\// {print $2; exit}')
opt_off=$("$h5dump" -p -H -d "$opt_ds" "$ckpt" | sed -n 's/.*OFFSET \([0-9]*\).*/\1/p' | head -1)
"$py" -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); b=f.read(4); f.seek(-4,1); f.write(bytes([b[0]^1])+b[1:])" "$dir/opt-state.h5" "$opt_off"
out=$("$tool" diff "$ckpt" "$dir/opt-state.h5"); rc=$?
check "diff notices optimizer state alone" '[ $rc -eq 1 ] && grep -q "^$opt_ds .*[1-9]" <<<"$out" && grep -q "checkpoints differ: 1 dataset" <<<"$out"'
out=$("$tool" diff "$ckpt" "$dir/opt-state.h5" --model-only); rc=$?
check "diff --model-only compares parameters only" '[ $rc -eq 0 ] && grep -q "identical" <<<"$out" && ! grep -q "^/optimizers" <<<"$out"'
# ... and its verdict says so, never claiming the optimizer state or metadata it did not compare.
check "diff --model-only says it compared parameters only" 'grep -q "^checkpoints have identical parameters (--model-only: optimizer state, hyperparameters, scaler and metadata not compared)$" <<<"$out" && ! grep -q "identical (parameters, optimizer state" <<<"$out"'

for dt in fp32 bf16 fp16; do
  st=$(tr a-z A-Z <<<"$dt" | sed 's/FP32/F32/; s/FP16/F16/')
  $mpiexec -n 2 "$tool" export "$ckpt" --to "$dir/model-$dt.safetensors" --dtype $dt >/dev/null
  out=$("$py" "$src/check_safetensors.py" "$dir/model-$dt.safetensors" "$ref" $st); rc=$?
  check "export --dtype $dt read back by an independent reader" '[ $rc -eq 0 ] && grep -q "PASS" <<<"$out" && grep -q "step" <<<"$out"'
done

$mpiexec -n 3 "$tool" import "$dir/model-fp32.safetensors" --to "$dir/imported.h5" >/dev/null
out=$("$tool" diff "$ckpt" "$dir/imported.h5" --model-only); rc=$?
check "import of the fp32 export equals the original" '[ $rc -eq 0 ]'
out=$("$tool" diff "$ckpt" "$dir/imported.h5"); rc=$?
check "diff names the optimizer state and metadata an import lacks" '[ $rc -eq 1 ] && grep -q "^only in $ckpt: /optimizers/0/" <<<"$out" && grep -q "optimizers: 1 vs 0" <<<"$out" && grep -q "metadata .imported_from. only in B" <<<"$out"'
out=$("$tool" verify "$dir/imported.h5"); rc=$?
check "imported checkpoint verifies" '[ $rc -eq 0 ]'
"$tool" import "$dir/model-bf16.safetensors" --to "$dir/imported16.h5" >/dev/null
out=$("$tool" diff "$ckpt" "$dir/imported16.h5" --model-only); rc=$?
check "bf16 round trip within bfloat16 rounding" '[ $rc -eq 1 ] && awk "NR>1 && NF==3 && \$3 > 0.0040 {bad=1} END {exit bad}" <<<"$out"'
check "diff --model-only: differing parameters named as such" 'grep -q "^checkpoints differ in their parameters (--model-only: nothing else compared): [1-9]" <<<"$out"'

out=$("$tool" info "$dir/missing.h5" 2>&1); rc=$?
check "missing file: one line, exit 2" '[ $rc -eq 2 ] && [ $(wc -l <<<"$out") -eq 1 ] && grep -q "No such file" <<<"$out"'
out=$("$tool" frobnicate 2>&1); rc=$?
check "unknown command" '[ $rc -eq 2 ] && grep -q "unknown command" <<<"$out"'
out=$("$tool" diff "$ckpt" "$ckpt" --frobnicate 2>&1); rc=$?
check "unknown option" '[ $rc -eq 2 ] && grep -q "unknown option .--frobnicate." <<<"$out"'
# Help, of the tool and of every command: the usage on stdout (nothing on stderr), exit 0.
for args in "-h" "--help" "help" "info -h" "info --help" "verify --help" "diff --help" \
            "diff A B --model-only -h" "export --help" "import -h"; do
  out=$("$tool" $args 2>"$dir/help-stderr.txt"); rc=$?
  check "fsdp-ckpt $args: usage on stdout, exit 0" '[ $rc -eq 0 ] && grep -q "^usage: fsdp-ckpt" <<<"$out" && grep -q "^  diff A B \[--model-only\]" <<<"$out" && [ ! -s "$dir/help-stderr.txt" ]'
done
out=$("$tool" import "$ckpt" --to "$dir/x.h5" 2>&1); rc=$?
check "import of a non-safetensors file" '[ $rc -eq 2 ] && grep -q "safetensors" <<<"$out"'

[ $fails -eq 0 ] && echo "PASS: fsdp-ckpt" || echo "FAILED: $fails check(s)"
exit $fails
