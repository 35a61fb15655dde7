#!/usr/bin/env bash
# Hugging Face's sharded safetensors through fsdp-ckpt (and so fsdp_safetensors_export/import):
# an export cut by --max-shard-size, read shard by shard by the PyPI safetensors package against
# the non-sharded reference; the directory imported back on another rank count equals the
# original checkpoint; and bad input (an index naming a missing shard, a shard whose header lies
# about sizes, a bad --max-shard-size) fails with one line naming the file and changes nothing.
# Usage: test_safetensors_sharded.sh <fsdp-ckpt> <mpiexec> <python with safetensors, or empty>
#        <checkpoint> <reference dir> <scratch dir> <tests source dir>
set -u
tool=$1 mpiexec=$2 py=$3 ckpt=$4 ref=$5 dir=$6 src=$7
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }
rm -rf "$dir" && mkdir -p "$dir"
limit=4096  # embed.weight (8448 bytes) gets a shard alone; the small tensors share one

out=$($mpiexec -n 2 "$tool" export "$ckpt" --to "$dir/hf" --max-shard-size ${limit}B); rc=$?
check "sharded export" '[ $rc -eq 0 ] && [ -f "$dir/hf/model.safetensors.index.json" ] && ls "$dir/hf" | grep -q "^model-00001-of-0000[2-9].safetensors$"'
if [ -n "$py" ] && [ -x "$py" ]; then
  out=$("$py" "$src/check_safetensors_sharded.py" "$dir/hf" "$ref" $limit); rc=$?
  echo "$out"
else
  out="no Python with PyTorch >= 2.6 (bench/setup-python.sh)" rc=77
fi
if [ $rc -eq 77 ]; then
  echo "skipped: the safetensors package reading the shards ($out)"
else
  check "every shard read by the safetensors package equals the reference" '[ $rc -eq 0 ]'
fi
out=$($mpiexec -n 3 "$tool" import "$dir/hf" --to "$dir/imported.h5"); rc=$?
out=$("$tool" diff "$ckpt" "$dir/imported.h5" --model-only); rc2=$?
check "the sharded directory imported on 3 ranks equals the original" '[ $rc -eq 0 ] && [ $rc2 -eq 0 ]'
out=$("$tool" import "$dir/hf/model.safetensors.index.json" --to "$dir/imported2.h5"); rc=$?
out=$("$tool" diff "$ckpt" "$dir/imported2.h5" --model-only); rc2=$?
check "the index file itself imports the same" '[ $rc -eq 0 ] && [ $rc2 -eq 0 ]'
out=$("$tool" export "$ckpt" --to "$dir/one" --max-shard-size 5GB); rc=$?
check "a limit above the model: model.safetensors alone, no index" '[ $rc -eq 0 ] && [ -f "$dir/one/model.safetensors" ] && [ ! -e "$dir/one/model.safetensors.index.json" ]'

# Bad input. The existing checkpoint at the target must survive each failure unchanged.
cp "$dir/imported.h5" "$dir/keep.h5"
sum() { md5sum "$1" | cut -d" " -f1; }
before=$(sum "$dir/keep.h5")
cp -r "$dir/hf" "$dir/missing"
gone=$(ls "$dir/missing" | grep "^model-00002" | head -1)
rm "$dir/missing/$gone"
out=$("$tool" import "$dir/missing" --to "$dir/keep.h5" 2>&1); rc=$?
check "an index naming a missing shard: the shard named, nothing written" '[ $rc -eq 2 ] && [ $(wc -l <<<"$out") -eq 1 ] && grep -q "$gone" <<<"$out" && [ "$(sum "$dir/keep.h5")" = "$before" ]'
cp -r "$dir/hf" "$dir/liar"
first=$(ls "$dir/liar" | grep "^model-00001")
python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.truncate(f.seek(0, 2) - 4)" "$dir/liar/$first"
out=$($mpiexec -n 2 "$tool" import "$dir/liar" --to "$dir/keep.h5" 2>&1); rc=$?
check "a shard whose header claims more bytes than it holds: the file named, nothing written" '[ $rc -eq 2 ] && grep -q "$first" <<<"$out" && grep -q "cover" <<<"$out" && [ "$(sum "$dir/keep.h5")" = "$before" ]'
cp -r "$dir/hf" "$dir/unlisted"
sed -i 's/"embed.weight"/"renamed.weight"/' "$dir/unlisted/model.safetensors.index.json"
out=$("$tool" import "$dir/unlisted" --to "$dir/keep.h5" 2>&1); rc=$?
check "an index that names a tensor its shard lacks: both named" '[ $rc -eq 2 ] && grep -q "renamed.weight" <<<"$out" && [ "$(sum "$dir/keep.h5")" = "$before" ]'
out=$("$tool" export "$ckpt" --to "$dir/bad" --max-shard-size 5XB 2>&1); rc=$?
check "--max-shard-size 5XB refused" '[ $rc -eq 2 ] && grep -q "max-shard-size" <<<"$out" && [ ! -e "$dir/bad" ]'

[ $fails -eq 0 ] && echo "PASS: sharded safetensors" || echo "FAILED: $fails check(s)"
exit $fails
