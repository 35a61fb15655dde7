#!/usr/bin/env bash
# fsdp-plan end to end: a table for a Hugging Face config.json and for a layout JSON whose shard,
# gradient and AdamW state bytes are computed here from its one parameter; the same figures in
# --json; the usage on stdout with exit 0 for -h; and bad input (options, files, fields): one line
# on stderr naming the option or the field, exit status 2, nothing on stdout.
# Usage: test_plan_tool.sh <fsdp-plan> <python3 or ""> <tests/data/plan> <scratch dir>
set -u
tool=$1 py=$2 data=$3 dir=$4
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }
mkdir -p "$dir"

out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8); rc=$?
check "a config.json: the model and both tables" '[ $rc -eq 0 ] && grep -q "13 units, 124,439,808 parameters" <<<"$out" && grep -q "parameter shards" <<<"$out" && grep -q "all-gather" <<<"$out" && grep -q "sent to other nodes" <<<"$out"'

# One float32 parameter of 1024 elements over 4 ranks: 256 elements each (a multiple of the
# 8-element alignment), so 1,024 bytes of shard, 1,024 of gradient shard and 2,048 of AdamW state
# (exp_avg, exp_avg_sq); SGD without momentum keeps none.
printf '{"units": [{"name": "u", "params": [{"name": "w", "shape": [1024]}]}]}\n' >"$dir/one.json"
out=$("$tool" "$dir/one.json" --world 4 --ranks-per-node 2); rc=$?
check "a layout: shard, gradient shard and AdamW state bytes" '[ $rc -eq 0 ] && grep -Eq "parameter shards .* 1,024$" <<<"$out" && grep -Eq "gradient shards .* 1,024$" <<<"$out" && grep -Eq "optimizer state .* 2,048$" <<<"$out"'
out=$("$tool" "$dir/one.json" --world 4 --ranks-per-node 2 --optimizer sgd); rc=$?
check "SGD without momentum: no state" '[ $rc -eq 0 ] && grep -Eq "optimizer state .* 0$" <<<"$out"'
out=$("$tool" "$dir/one.json" --world 4 --ranks-per-node 2 --optimizer sgd --momentum 0.9); rc=$?
check "SGD with momentum: one buffer" '[ $rc -eq 0 ] && grep -Eq "optimizer state .* 1,024$" <<<"$out"'
out=$("$tool" "$dir/one.json" --world 4 --ranks-per-node 2 --json); rc=$?
[ -n "$py" ] && check "--json: the same figures" '[ $rc -eq 0 ] && "$py" -c "import json,sys; d=json.loads(sys.argv[1]); m=d[\"memory\"]; assert (m[\"shard_bytes\"], m[\"grad_shard_bytes\"], m[\"optimizer_state_bytes\"]) == (1024, 1024, 2048), m; assert d[\"traffic\"][\"all_gather_calls\"] >= 1" "$out"'

out=$("$tool" --help); rc=$?
check "--help: the usage on stdout" '[ $rc -eq 0 ] && grep -q "^usage: fsdp-plan MODEL" <<<"$out"'

# Bad input: exit 2, the option or field named on stderr, nothing on stdout.
refused() {
  local what=$1 words=$2
  shift 2
  local out err rc
  out=$("$tool" "$@" 2>"$dir/err.txt"); rc=$?
  err=$(cat "$dir/err.txt")
  check "refused: $what" '[ $rc -eq 2 ] && [ -z "$out" ] && grep -qF -- "$words" <<<"$err" && [ $(wc -l <"$dir/err.txt") -ge 1 ]'
  [ $rc -eq 2 ] || echo "     ($rc) $err"
}
g=$data/gpt2.json
refused "no model" "no MODEL given" --world 2 --ranks-per-node 1
refused "no --world" "--world: required" "$g" --ranks-per-node 1
refused "--world 0" "--world 0: expected a whole number from 1" "$g" --world 0 --ranks-per-node 1
refused "--world not a number" "--world two" "$g" --world two --ranks-per-node 1
refused "an unknown option" "--nodes: unknown option" "$g" --world 2 --ranks-per-node 1 --nodes 2
refused "a value missing" "--factor: needs a value" "$g" --world 2 --ranks-per-node 1 --factor
refused "an unknown strategy" "--strategy half: expected full, hybrid or none" "$g" --world 2 --ranks-per-node 1 --strategy half
refused "an unknown dtype" "--param-dtype float8: expected one of float32, float64, bfloat16, float16" "$g" --world 2 --ranks-per-node 1 --param-dtype float8
refused "an unknown optimizer" "--optimizer lamb: expected one of sgd, adamw, none" "$g" --world 2 --ranks-per-node 1 --optimizer lamb
refused "momentum without an optimizer" "--momentum: needs an optimizer" "$g" --world 2 --ranks-per-node 1 --optimizer none --momentum 0.9
refused "an unknown format" "--format yaml" "$g" --world 2 --ranks-per-node 1 --format yaml
refused "a factor not dividing the world" "sharding_factor" "$g" --world 16 --ranks-per-node 8 --strategy hybrid --factor 3
refused "nodes of unequal size" "ranks_per_node" "$g" --world 16 --ranks-per-node 3
refused "a rank past the world" "rank" "$g" --world 2 --ranks-per-node 1 --rank 2
refused "no such file" "$dir/absent.json" "$dir/absent.json" --world 2 --ranks-per-node 1
refused "JSON that does not parse" "line 2" "$data/bad-syntax.json" --world 2 --ranks-per-node 1
refused "a negative extent" "units[0].params[0].shape[1] = -8" "$data/bad-negative.json" --world 2 --ranks-per-node 1
refused "an unknown dtype in the file" "units[0].params[0].dtype = 'float8'" "$data/bad-dtype.json" --world 2 --ranks-per-node 1
refused "an architecture not understood" "model_type = 'bert'" "$data/bad-arch.json" --world 2 --ranks-per-node 1
refused "a required field missing" "num_hidden_layers: missing" "$data/bad-missing.json" --world 2 --ranks-per-node 1
refused "a config.json read as a checkpoint" "gpt2.json" "$g" --format checkpoint --world 2 --ranks-per-node 1

if [ $fails -eq 0 ]; then echo "PASS: fsdp-plan"; else echo "$fails check(s) failed"; exit 1; fi
