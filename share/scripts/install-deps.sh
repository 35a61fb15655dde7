#!/usr/bin/env bash
# Installs the Debian packages libfsdp needs to build and test, if any are missing. Idempotent:
# a machine that has them all is left alone (no apt-get update, no network).
set -euo pipefail
# libhdf5-mpich-dev: parallel HDF5 for checkpoints; hdf5-tools: h5dump, the tests' independent reader.
# gfortran: the Fortran module and its tests. libopenblas-dev: CBLAS for the C example. python3-numpy,
# python3-torch, python3-matplotlib: the Python binding, its PyTorch example and plot (for
# /usr/bin/python3). doxygen: the API reference. clang + libclang-rt-14-dev (libFuzzer, Debian 12's
# clang 14) and valgrind: `make fuzz` and `make memcheck` (doc/testing.md). abigail-tools: abidw and
# abidiff, the ABI check against share/abi/ (doc/abi.md). Open MPI beside MPICH (openmpi-bin,
# libopenmpi-dev, libhdf5-openmpi-dev): the suite under the second MPI (make check MPI=openmpi);
# installing it leaves the machine's default MPI as it was (below). slurm-wlm + munge: the real
# Slurm of test_slurm_submit; lmod: test_modulefile.
packages=(build-essential cmake binutils pkg-config gfortran mpich libmpich-dev libhdf5-mpich-dev
          hdf5-tools libopenblas-dev python3-numpy python3-torch python3-matplotlib doxygen
          clang libclang-rt-14-dev valgrind abigail-tools
          openmpi-bin libopenmpi-dev libhdf5-openmpi-dev slurm-wlm munge lmod)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "libfsdp: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  sudo=""
elif command -v sudo >/dev/null 2>&1; then
  sudo="sudo"
else
  echo "libfsdp: not root and no sudo; install these first: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# The MPI alternatives (the generic mpicc, mpiexec, mpi.h, h5pcc) as they are now: installing a
# second MPI switches them to it in auto mode (Open MPI ranks above MPICH), so they are put back.
groups=(mpi mpirun mpi-x86_64-linux-gnu h5pcc)
declare -A chosen=()
for g in "${groups[@]}"; do
  # (a group that does not exist yet makes --query fail: no value, not an error)
  chosen[$g]=$(update-alternatives --query "$g" 2>/dev/null | sed -n 's/^Value: //p' || true)
done
# Package lists: a fresh machine's first update can fail while its network comes up.
for try in 1 2 3; do
  $sudo apt-get update -qq && break
  [ "$try" -eq 3 ] && exit 1
  sleep 10
done
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
for g in "${groups[@]}"; do
  v=${chosen[$g]}
  # A machine that had no MPI before: MPICH, the one the Makefile and the docs default to.
  [ -z "$v" ] && v=$(update-alternatives --list "$g" 2>/dev/null | grep -m1 mpich || true)
  [ -n "$v" ] && $sudo update-alternatives --quiet --set "$g" "$v"
done
