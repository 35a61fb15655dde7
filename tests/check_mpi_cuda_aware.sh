#!/usr/bin/env bash
# Whether the MPI is CUDA-aware, as its own tool reports its build (the reference), then
# test_mpi_cuda_aware compares the library's run-time detection with it.
#   check_mpi_cuda_aware.sh <mpiexec> <test program> <MPI flavour: openmpi|mpich|other>
set -euo pipefail
mpiexec=$1 program=$2 flavor=$3
case $flavor in
  openmpi)
    info=$(dirname "$(readlink -f "$(command -v "$mpiexec")")")/ompi_info
    [ -x "$info" ] || info=ompi_info
    value=$("$info" --parsable --all | sed -n 's/^mca:mpi:base:param:mpi_built_with_cuda_support:value://p')
    [ -n "$value" ] || { echo "skipped: ompi_info does not say mpi_built_with_cuda_support"; exit 77; }
    [ "$value" = true ] && expected=yes || expected=no ;;
  mpich)
    command -v mpichversion > /dev/null || { echo "skipped: no mpichversion"; exit 77; }
    if mpichversion | grep -q -- '--with-cuda\(=[^n ][^ ]*\)\?\( \|$\)'; then expected=yes; else expected=no; fi ;;
  *) echo "skipped: no reference for an MPI other than Open MPI and MPICH"; exit 77 ;;
esac
exec "$mpiexec" -n 1 "$program" "$expected"
