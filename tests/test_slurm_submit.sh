#!/usr/bin/env bash
# share/slurm/fsdp_train.sbatch under a real Slurm: starts a one-node cluster on this machine
# (munged, slurmctld and slurmd of Debian's slurm-wlm, with their own slurm.conf, munge key,
# sockets, ports and spool in scratch directories; nothing of /etc is used), submits the script
# with `sbatch -N1 -n2` (its srun starts the ranks through the PMI this MPI speaks: pmi2 for
# MPICH, pmix for Open MPI; FSDP_SRUN_MPI overrides), waits for the job, then submits a second
# job that resumes from the first one's checkpoint, and a third with srun --mpi=none that must
# fail saying its ranks did not join (not train alone). Each job has a deadline; the daemons are
# stopped on every way out.
# Skipped (77) where Slurm cannot start here: not root, slurm-wlm or munge missing, no such srun
# MPI plugin, or the daemons do not come up.
#   test_slurm_submit.sh <source dir> <work dir> <mpiexec> <program>
set -euo pipefail
src=$1 work=$2 mpiexec=$3 program=${4:-}
job_deadline=240  # seconds a job may take from submission to its end

skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "starting slurmctld and slurmd (SlurmdUser=root) needs root"
for cmd in munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
  command -v "$cmd" > /dev/null ||
    skip "no $cmd (Debian: apt-get install slurm-wlm munge)"
done
[ -x "$program" ] ||
  skip "no program to run ('$program': not built; the C MLP example needs OpenBLAS)"
program=$(realpath "$program")
# The PMI srun gives the ranks: the one this MPI's processes speak.
if [ -z "${FSDP_SRUN_MPI:-}" ]; then
  case $("$mpiexec" --version 2>&1) in
    *"Open MPI"* | *OpenRTE*) FSDP_SRUN_MPI=pmix ;;
    *) FSDP_SRUN_MPI=pmi2 ;;
  esac
fi
# Nothing of an enclosing Slurm job or MPI launch may leak into this cluster's commands.
for v in $(compgen -e); do
  case $v in SLURM_* | SBATCH_* | SRUN_* | SALLOC_* | PMI_* | PMIX_*) unset "$v" ;; esac
done

rm -rf "$work" && mkdir -p "$work/log"
cd "$work" && work=$(pwd -P)
# Sockets (munge's, slurmstepd's) need short paths: the daemons' files go under /tmp.
run=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-slurm.XXXXXX")
pids=()
jobs_submitted=()
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  if [ ${#jobs_submitted[@]} -gt 0 ]; then  # cancel our jobs, let their steps end
    scancel "${jobs_submitted[@]}" 2> /dev/null || true
    for _ in $(seq 20); do
      [ -z "$(squeue -h -o %i 2> /dev/null)" ] && break
      sleep 0.5
    done
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done  # slurmd, slurmctld, munged
  # slurmd's step daemons live on their own for a moment: ours carry this cluster's SLURM_CONF.
  for pid in $(pgrep -x slurmstepd || true); do
    grep -qzx "SLURM_CONF=${SLURM_CONF:-none}" "/proc/$pid/environ" 2> /dev/null && pids+=("$pid")
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 20); do kill -0 "$pid" 2> /dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2> /dev/null || true
  done
  rm -rf "$run"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Show a daemon's log, then skip: Slurm could not be started on this machine.
no_slurm() {
  local f
  for f in "$work/log/$1.log" "$work/log/$1.out"; do
    [ -s "$f" ] && { echo "--- $f (last lines)"; tail -n 15 "$f"; }
  done
  skip "$2"
}

# munge: a fresh key, its own socket (the socket's directory must be searchable by all).
mkdir -p "$run/munge" "$run/socket" "$run/state" "$run/spool"
chmod 700 "$run/munge" && chmod 755 "$run" "$run/socket"
(umask 077 && head -c 1024 /dev/urandom > "$run/munge/munge.key")
munge_socket=$run/socket/munge.sock
munged -F --socket="$munge_socket" --key-file="$run/munge/munge.key" \
  --pid-file="$run/socket/munged.pid" --seed-file="$run/munge/munged.seed" \
  --log-file="$work/log/munged.log" > "$work/log/munged.out" 2>&1 &
pids=($!)
for _ in $(seq 40); do
  [ -S "$munge_socket" ] || ! kill -0 "${pids[0]}" 2> /dev/null && break
  sleep 0.25
done
[ -S "$munge_socket" ] || no_slurm munged "munged did not start"

# Two free TCP ports for slurmctld and slurmd.
port_free() { [ -z "$(ss -Htln "sport = :$1" 2> /dev/null)" ]; }
ctld_port=""
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 30000))
  if port_free "$p" && port_free $((p + 1)); then ctld_port=$p; break; fi
done
[ -n "$ctld_port" ] || skip "no two free TCP ports found for slurmctld and slurmd"

host=$(hostname -s)
cpus=$(nproc)
[ "$cpus" -ge 2 ] || cpus=2  # the test runs 2 ranks; config_overrides lets slurmd report 2
export SLURM_CONF=$work/slurm.conf
cat > "$SLURM_CONF" << EOF
ClusterName=fsdptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
StateSaveLocation=$run/state
SlurmdSpoolDir=$run/spool
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=fsdp Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -c -f "$SLURM_CONF" > "$work/log/slurmctld.out" 2>&1 &
pids=($! "${pids[@]}")
slurmd -D -N "$host" -f "$SLURM_CONF" > "$work/log/slurmd.out" 2>&1 &
pids=($! "${pids[@]}")
state=""
for _ in $(seq 60); do  # the node registers and becomes idle
  kill -0 "${pids[1]}" 2> /dev/null || no_slurm slurmctld "slurmctld did not start"
  kill -0 "${pids[0]}" 2> /dev/null || no_slurm slurmd "slurmd did not start"
  state=$(sinfo -h -n "$host" -o %t 2> /dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] ||
  no_slurm slurmd "the Slurm node did not become idle in 30 s (state '${state:-none}')"
srun --mpi=list 2>&1 | grep -qw "$FSDP_SRUN_MPI" ||
  skip "this Slurm has no srun --mpi=$FSDP_SRUN_MPI plugin (Debian: slurm-wlm-basic-plugins)"
echo "Slurm up: node $host, $cpus CPUs, slurmctld port $ctld_port, srun --mpi=$FSDP_SRUN_MPI"

# One job of the batch script on 2 ranks of the node: waits for its end, prints its output.
# $1: a name for the log; the rest: VAR=value settings for the job. Sets job, jobstate, out.
submit() {
  local name=$1 info="" deadline=$((SECONDS + job_deadline))
  shift
  job=$(env "$@" sbatch --parsable -D "$work" -N1 -n2 --ntasks-per-node=2 --cpus-per-task=1 \
          --time=10 "$src/share/slurm/fsdp_train.sbatch") || fail "sbatch of the $name job failed"
  job=${job%%;*}
  jobs_submitted+=("$job")
  while [ $SECONDS -lt $deadline ]; do
    info=$(scontrol -o show job "$job" 2> /dev/null || true)
    jobstate=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<< "$info")
    case $jobstate in PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 1 ;; *) break ;; esac
  done
  out=$work/$name.out
  echo "--- $name job $job: $jobstate ($(grep -o 'ExitCode=[^ ]*' <<< "$info" || true))"
  # The script's --output=%x-%j.out, in the submission directory (-D).
  cp "$work/fsdp-train-$job.out" "$out" 2> /dev/null || echo "(no output file)" > "$out"
  cat "$out"
  case $jobstate in
    PENDING | CONFIGURING | RUNNING | COMPLETING | "")
      fail "the $name job $job did not end within $job_deadline s" \
           "($(grep -o 'Reason=[^ ]*' <<< "$info" || true))" ;;
  esac
}
# A job that must have trained on 2 ranks and saved.
submit_ok() {
  submit "$@"
  [ "$jobstate" = COMPLETED ] || fail "the $1 job $job ended $jobstate"
  grep -q "over [0-9]* steps on 2 ranks" "$out" || fail "the $1 job did not train on 2 ranks"
}

common=(PROGRAM="$program" FSDP_PREFIX="$work/no-prefix")
submit_ok train "${common[@]}" FSDP_SRUN_MPI="$FSDP_SRUN_MPI"
ckpt=$work/checkpoints/$job/model.h5
[ -f "$ckpt" ] || fail "the first job left no checkpoint $ckpt"
submit_ok resume "${common[@]}" FSDP_SRUN_MPI="$FSDP_SRUN_MPI" RESUME_FROM="$ckpt"
grep -q "^resumed " "$out" || fail "the second job did not resume from $ckpt"
# srun without a PMI: 2 processes of 1 rank each must fail at start (fsdp_init names the
# launcher; Open MPI stops in MPI_Init), not train twice alone.
submit nopmi "${common[@]}" FSDP_SRUN_MPI=none
[ "$jobstate" != COMPLETED ] || fail "srun --mpi=none: the job completed (each rank alone)"
grep -q -e "did not join that launcher's job" -e "PMI support" "$out" ||
  fail "srun --mpi=none: the job failed without saying that its ranks did not join"
echo "Slurm submit: OK (sbatch + srun --mpi=$FSDP_SRUN_MPI trained, saved, resumed;" \
     "srun --mpi=none refused)"
