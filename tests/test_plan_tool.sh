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

# A machine: the step time and whether it fits; the activations of GPT-2 small in bfloat16 at
# batch 2, sequence 512 from Korthikanti et al.'s s b h (34 + 5 a s / h) per layer, 12 layers.
out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine a100-80gb-efa --batch 2 --seq 512 --param-dtype bfloat16); rc=$?
check "--machine: the step time and the fit" '[ $rc -eq 0 ] && grep -q "step time on a100-80gb-efa" <<<"$out" && grep -Eq "fits +yes" <<<"$out" && grep -q "device total" <<<"$out" && grep -q "TFLOPS per GPU" <<<"$out"'
out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine a100-80gb-efa --batch 2 --seq 512 --param-dtype bfloat16 --json); rc=$?
[ -n "$py" ] && check "--machine --json: activations, totals, time, fits" '[ $rc -eq 0 ] && "$py" -c "
import json, sys
d = json.loads(sys.argv[1]); m = d[\"memory\"]; t = d[\"time\"]
s, b, h, a = 512, 2, 768, 12
assert m[\"activation_bytes\"] == 12 * s * b * h * (34 + 5 * a * s // h), m
assert m[\"device_total_bytes\"] == m[\"peak_bytes\"] + m[\"activation_bytes\"] and m[\"host_total_bytes\"] == 0, m
for k in (\"compute_s\", \"all_gather_s\", \"reduce_scatter_s\", \"exposed_comm_s\", \"step_s\", \"tflops_per_gpu\", \"model_flops_per_step\"):
    assert k in t, k
assert abs(t[\"step_s\"] - t[\"compute_s\"] - t[\"exposed_comm_s\"]) < 1e-12 and d[\"fits\"] is True
" "$out"'
echo '{"peak_flops_16bit": 1e14, "peak_flops_32bit": 1e13, "peak_flops_64bit": 5e12, "hbm_bytes": 17179869184, "intra_node_bandwidth": 1e11, "intra_node_latency_s": 1e-5, "inter_node_bandwidth": 1e10, "inter_node_latency_s": 2e-5, "host_device_bandwidth": 1e10, "compute_efficiency": 0.4}' >"$dir/machine.json"
out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine "$dir/machine.json" --batch 64 --seq 1024); rc=$?
check "a machine file: 16 GiB do not hold batch 64" '[ $rc -eq 0 ] && grep -Eq "fits +no" <<<"$out"'
"$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine a100-40gb-efa --seq 1024 --sweep --json >"$dir/sweep.json"; rc=$?
[ -n "$py" ] && check "--sweep --json: fits, fastest first, every axis" '[ $rc -eq 0 ] && "$py" -c "
import json, sys
d = json.load(open(sys.argv[1])); c = d[\"configurations\"]
assert d[\"budget_bytes\"] == 40 << 30 and c
assert all(x[\"memory\"][\"device_total_bytes\"] <= 40 << 30 for x in c)
r = [x[\"tokens_per_s\"] for x in c]; assert r == sorted(r, reverse=True)
assert {x[\"strategy\"] for x in c} == {\"full\", \"hybrid\", \"none\"}
assert {x[\"sharding_factor\"] for x in c if x[\"strategy\"] == \"hybrid\"} == {2, 4, 8}
assert {x[\"param_dtype\"] for x in c} == {\"float32\", \"bfloat16\"}
assert {x[\"cpu_offload\"] for x in c} == {True, False} and {x[\"activation_checkpointing\"] for x in c} == {True, False}
assert all(abs(x[\"tokens_per_s\"] - x[\"time\"][\"tokens_per_step\"] / x[\"time\"][\"step_s\"]) < 1e-6 * x[\"tokens_per_s\"] for x in c)
" "$dir/sweep.json"'
out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine a100-40gb-efa --sweep --budget 1000 --json); rc=$?
check "--sweep with a budget nothing fits" '[ $rc -eq 0 ] && grep -q "\"configurations\": \[\]" <<<"$out"'
out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine a100-40gb-efa --sweep); rc=$?
check "--sweep: a table" '[ $rc -eq 0 ] && grep -q "fastest first" <<<"$out" && grep -q "TFLOPS" <<<"$out"'
# The table shows the 20 fastest by default, --top N the N fastest, --top 0 all (--json: all).
total=$("$py" -c "import json,sys; print(len(json.load(open(sys.argv[1]))['configurations']))" "$dir/sweep.json" 2>/dev/null)
rows() { grep -Ec "^(full|hybrid|none)" <<<"$1"; }
out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine a100-40gb-efa --seq 1024 --sweep); rc=$?
[ -n "$py" ] && check "--sweep: 20 rows, then how many more" '[ $rc -eq 0 ] && [ "$(rows "$out")" -eq 20 ] && grep -q "^\.\.\. and $((total - 20)) slower (--top 0 lists all)$" <<<"$out"'
out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine a100-40gb-efa --seq 1024 --sweep --top 3); rc=$?
first=$("$py" -c "import json,sys; c=json.load(open(sys.argv[1]))['configurations'][0]; print(c['strategy'], c['sharding_factor'], c['batch_size'])" "$dir/sweep.json" 2>/dev/null)
[ -n "$py" ] && check "--sweep --top 3: the 3 fastest" '[ $rc -eq 0 ] && [ "$(rows "$out")" -eq 3 ] && awk "/^(full|hybrid|none)/ {print \$1, \$2, \$6; exit}" <<<"$out" | grep -qx "$first"'
out=$("$tool" "$data/gpt2.json" --world 16 --ranks-per-node 8 --machine a100-40gb-efa --seq 1024 --sweep --top 0); rc=$?
[ -n "$py" ] && check "--sweep --top 0: every row" '[ $rc -eq 0 ] && [ "$(rows "$out")" -eq "$total" ] && ! grep -q "slower" <<<"$out"'

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
refused "an unknown preset" "'a100-20gb'" "$g" --world 2 --ranks-per-node 1 --machine a100-20gb
refused "batch 0" "--batch 0: expected a whole number from 1" "$g" --world 2 --ranks-per-node 1 --batch 0
refused "a negative sequence" "--seq -4" "$g" --world 2 --ranks-per-node 1 --seq -4
refused "a sequence past the model's" "sequence_length = 2048" "$g" --world 2 --ranks-per-node 1 --seq 2048
refused "negative activation bytes" "--activation-bytes-per-layer -5" "$g" --world 2 --ranks-per-node 1 --activation-bytes-per-layer -5
refused "--sweep without a machine" "--sweep: needs --machine" "$g" --world 2 --ranks-per-node 1 --sweep
refused "--budget without --sweep" "--budget: only with --sweep" "$g" --world 2 --ranks-per-node 1 --budget 100
refused "--top without --sweep" "--top: only with --sweep" "$g" --world 2 --ranks-per-node 1 --top 3
refused "--top negative" "--top" "$g" --world 16 --ranks-per-node 8 --machine a100-40gb-efa --sweep --top -1
refused "an unknown memory space" "--memory-space gpu" "$g" --world 2 --ranks-per-node 1 --memory-space gpu
refused "offload from host memory" "--cpu-offload" "$g" --world 2 --ranks-per-node 1 --memory-space host --cpu-offload
sed 's/"inter_node_bandwidth": 1e10/"inter_node_bandwidth": 0/' "$dir/machine.json" >"$dir/machine0.json"
refused "a machine with zero bandwidth" "machine->inter_node_bandwidth" "$g" --world 2 --ranks-per-node 1 --machine "$dir/machine0.json"
sed 's/"compute_efficiency": 0.4//; s/, }/}/' "$dir/machine.json" >"$dir/machine1.json"
refused "a machine field missing" "compute_efficiency" "$g" --world 2 --ranks-per-node 1 --machine "$dir/machine1.json"
refused "a layout without a sequence on a machine" "job->sequence_length" "$dir/one.json" --world 4 --ranks-per-node 2 --machine a100-80gb-efa

if [ $fails -eq 0 ]; then echo "PASS: fsdp-plan"; else echo "$fails check(s) failed"; exit 1; fi
