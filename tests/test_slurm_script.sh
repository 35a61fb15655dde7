#!/usr/bin/env bash
# Runs share/slurm/fsdp_train.sbatch outside Slurm: the SLURM_* variables a 2-node x 2-task
# allocation sets, and an `srun` stand-in that starts the tasks with mpiexec. Trains and saves,
# then a second "job" resumes from the first one's checkpoint. The stand-in starts 4 ranks: Open
# MPI's mpiexec refuses more ranks than cores unless told (OMPI_MCA_rmaps_base_oversubscribe=1, set
# for every test, or FSDP_MPIEXEC_FLAGS="--oversubscribe": extra flags the stand-in passes on).
#   test_slurm_script.sh <source dir> <work dir> <mpiexec> <program>
# Exits 77 (skipped) when <program> is "" (the C MLP example was not built: no OpenBLAS).
set -euo pipefail
if [ -z "$4" ]; then
  echo "SKIP: no program (the C MLP example, examples/mlp, needs OpenBLAS)"
  exit 77
fi
src=$1 work=$2 mpiexec=$3 program=$(realpath "$4")
rm -rf "$work" && mkdir -p "$work/bin"
cat > "$work/bin/srun" <<STUB
#!/usr/bin/env bash
# srun stand-in: drop srun's own options, run the rest on \$SLURM_NTASKS ranks.
while [ "\${1#--}" != "\$1" ]; do shift; done
exec "$mpiexec" ${FSDP_MPIEXEC_FLAGS:-} -n "\$SLURM_NTASKS" "\$@"
STUB
chmod +x "$work/bin/srun"
export PATH="$work/bin:$PATH" SLURM_NTASKS=4 SLURM_NNODES=2 SLURM_TASKS_PER_NODE="2(x2)"
export SLURM_CPUS_PER_TASK=1 PROGRAM=$program CKPT_DIR=$work/ckpt FSDP_PREFIX=$work/no-prefix
cd "$work"
SLURM_JOB_ID=1 SLURM_NTASKS_PER_NODE=2 bash "$src/share/slurm/fsdp_train.sbatch"
[ -f "$work/ckpt/model.h5" ] || { echo "FAIL: no checkpoint"; exit 1; }
# Without --ntasks-per-node (no SLURM_NTASKS_PER_NODE), F comes from SLURM_TASKS_PER_NODE "2(x2)".
SLURM_JOB_ID=2 RESUME_FROM=$work/ckpt/model.h5 bash "$src/share/slurm/fsdp_train.sbatch" |
  tee "$work/resume.log"
grep -q "^resumed .* F = 2 " "$work/resume.log" ||
  { echo "FAIL: the second job did not resume with F = 2 (ranks per node)"; exit 1; }
echo "Slurm script: OK"
