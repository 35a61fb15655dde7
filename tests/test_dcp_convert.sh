#!/usr/bin/env bash
# libfsdp.dcp round trip against PyTorch FSDP2 (check_dcp_convert.py): FSDP2 (2 ranks) writes a
# DCP checkpoint of model + AdamW state with two param groups; it is converted to a libfsdp
# checkpoint on 3 ranks, loaded by libfsdp on 2 ranks (bitwise against FSDP2's full state),
# converted back to DCP, and loaded by FSDP2 on 3 ranks (bitwise), and one more FSDP2 step from the
# original and from the round-tripped directory agree bit for bit; a model without optimizer
# state (float32, float64, bfloat16) and SGD's momentum round-trip too. Bad input (a missing or
# truncated data file, a state whose shape disagrees with its parameter, group patterns that do
# not match the groups, a file that is not a checkpoint, a target that is not a DCP directory, a
# multi-rank to-dcp) fails with exit 2 and one line naming the file or tensor, and leaves the
# existing target as it was.
# Usage: test_dcp_convert.sh <mpiexec> <python with PyTorch >= 2.6, or empty> <scratch dir>
#        <tests source dir>
set -u
mpiexec=$1 py=$2 dir=$3 src=$4
if [ -z "$py" ] || [ ! -x "$py" ] || ! "$py" -c "import torch.distributed.checkpoint" 2>/dev/null; then
  echo "skipped: no Python with PyTorch >= 2.6 (bench/setup-python.sh)"
  exit 77
fi
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }
rm -rf "$dir" && mkdir -p "$dir"
chk="$py $src/check_dcp_convert.py"
conv="$py -m libfsdp.dcp"

$chk queries; rc=$?
check "the library's optimizer kinds (state, hyperparameters, defaults) are torch.optim's" '[ $rc -eq 0 ]'

$chk fsdp2-save "$dir/fsdp2" "$dir/ref.pt"; rc=$?
[ $rc -eq 77 ] && exit 77
check "FSDP2 trains and writes a DCP checkpoint" '[ $rc -eq 0 ] && [ -f "$dir/fsdp2/.metadata" ]'
out=$($mpiexec -n 3 $conv to-libfsdp "$dir/fsdp2" "$dir/c.h5" --group-patterns '*.bias' 2>&1)
rc=$?
echo "$out"
check "to-libfsdp on 3 ranks" '[ $rc -eq 0 ] && [ -f "$dir/c.h5" ] && [ $(echo "$out" | grep -c "8 parameters, optimizer adamw") -eq 1 ]'
$mpiexec -n 2 $chk libfsdp-load "$dir/c.h5" "$dir/ref.pt"; rc=$?
check "libfsdp (2 ranks, other units) loads FSDP2's parameters, AdamW state and steps bit for bit" '[ $rc -eq 0 ]'
out=$($conv to-dcp "$dir/c.h5" "$dir/back" 2>&1); rc=$?
echo "$out"
check "to-dcp" '[ $rc -eq 0 ] && [ -f "$dir/back/.metadata" ]'
$chk fsdp2-load "$dir/back" "$dir/ref.pt" 3; rc=$?
check "FSDP2 (3 ranks) loads the round-tripped directory bit for bit, hyperparameters included" '[ $rc -eq 0 ]'
$chk fsdp2-continue "$dir/fsdp2" "$dir/back"; rc=$?
check "one more FSDP2 step from the original and from the round trip: equal bit for bit" '[ $rc -eq 0 ]'
$chk model-only "$dir/model" > /dev/null 2>&1
out=$($mpiexec -n 2 $conv import "$dir/model" --to "$dir/model.h5" 2>&1) && out=$($conv to-dcp "$dir/model.h5" "$dir/model-back" 2>&1)
rc=$?
check "a model without optimizer state (float32, float64, bfloat16) round-trips" '[ $rc -eq 0 ] && echo "$out" | grep -q "3 parameters, optimizer none" && $chk same-model "$dir/model" "$dir/model-back"'
$chk sgd "$dir/sgd" > /dev/null 2>&1
out=$($conv import "$dir/sgd" --to "$dir/sgd.h5" 2>&1) && out=$($conv export "$dir/sgd.h5" --to "$dir/sgd-back" 2>&1)
rc=$?
check "SGD's momentum_buffer round-trips" '[ $rc -eq 0 ] && echo "$out" | grep -q "1 parameters, optimizer sgd" && $chk same-model "$dir/sgd" "$dir/sgd-back"'
out=$($conv export "$dir/c.h5" --to "$dir/back" 2>&1); rc=$?
check "export --to (fsdp-ckpt's spelling) replaces an existing DCP directory" '[ $rc -eq 0 ] && [ -f "$dir/back/.metadata" ] && [ -z "$(ls -d "$dir"/back.* 2>/dev/null)" ]'

# Bad input: exit 2, one line naming the file or tensor, the existing target unchanged.
sum() { md5sum "$1" | cut -d" " -f1; }
keep=$(sum "$dir/c.h5")
refused() {  # <what> <expected text> <command...>
  local what=$1 text=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  check "$what: refused naming it" '[ $rc -eq 2 ] && echo "$out" | grep -qF -- "$text" && [ $(echo "$out" | wc -l) -eq 1 ]'
  [ $rc -eq 2 ] || echo "$out"
}
cp -r "$dir/fsdp2" "$dir/missing" && rm "$dir/missing/__1_0.distcp"
refused "a missing data file" "__1_0.distcp: missing (it holds tensor" $conv to-libfsdp "$dir/missing" "$dir/c.h5"
cp -r "$dir/fsdp2" "$dir/short" && truncate -s 100 "$dir/short/__0_0.distcp"
refused "a truncated data file" "__0_0.distcp: 100 bytes, but tensor" $conv to-libfsdp "$dir/short" "$dir/c.h5"
$chk bad-shape "$dir/shape" > /dev/null 2>&1
refused "an exp_avg whose shape disagrees with its parameter" "tensor 'optim.state.w.exp_avg' has shape [4, 3], its parameter 'model.w' [3, 4]" $conv to-libfsdp "$dir/shape" "$dir/c.h5"
refused "group patterns that put a parameter in another group" "'embed.bias' is in param_groups[1] but the patterns put it in param_groups[0]" $conv to-libfsdp "$dir/fsdp2" "$dir/c.h5" --group-patterns 'blocks.*.bias'
refused "a directory without .metadata" "no .metadata file" $conv to-libfsdp "$src" "$dir/c.h5"
out=$($conv to-libfsdp "$dir/fsdp2" 2>&1); rc=$?
check "no target: a usage error" '[ $rc -eq 2 ] && echo "$out" | grep -q "give the target"'

check "the existing checkpoint survived every refusal" '[ "$(sum "$dir/c.h5")" = "$keep" ]'
keep=$(sum "$dir/back/.metadata")
refused "to-dcp from a file that is not a checkpoint" "FSDP_ERR" $conv to-dcp "$dir/ref.pt" "$dir/back"
mkdir -p "$dir/user" && echo data > "$dir/user/notes.txt"
refused "to-dcp onto a directory that is not a DCP checkpoint" "is not a DCP checkpoint directory; not replaced" $conv to-dcp "$dir/c.h5" "$dir/user"
out=$($mpiexec -n 2 $conv to-dcp "$dir/c.h5" "$dir/back" 2>&1); rc=$?
check "to-dcp on 2 ranks: refused" '[ $rc -eq 2 ] && echo "$out" | grep -q "to-dcp runs on one rank (launched on 2)"'
check "the existing DCP directory and the user's directory survived" '[ "$(sum "$dir/back/.metadata")" = "$keep" ] && [ "$(cat "$dir/user/notes.txt")" = data ]'

if [ $fails -eq 0 ]; then
  echo "PASS: DCP interchange"
else
  echo "$fails check(s) failed"
  exit 1
fi
