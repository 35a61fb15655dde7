#!/usr/bin/env bash
# A test whose optional dependency is missing reports Skipped, never Passed (cmake/FsdpSkip.cmake).
# Configures a scratch tree of the project without those dependencies (FSDP_PYTHON=OFF,
# FSDP_TORCH_PYTHON=OFF, FSDP_JAX_PYTHON=OFF, no Python3 package, no Doxygen; nothing is built) and runs every test
# that needs them there: the ones labelled python or pytorch, test_python_capi and
# doc_api_reference. Each must report Skipped; the PyTorch >= 2.6 ones must be among them.
# Usage: check_skips.sh <cmake> <ctest> <source dir> <scratch dir> [<cmake argument>...]
#        (the parent tree's generator, compilers, MPI and HDF5)
set -u
cmake=$1 ctest=$2 src=$3 dir=$4
shift 4
rm -rf "$dir" && mkdir -p "$dir"
if ! "$cmake" -S "$src" -B "$dir" "$@" -DFSDP_PYTHON=OFF -DFSDP_TORCH_PYTHON=OFF \
     -DFSDP_JAX_PYTHON=OFF \
     -DCMAKE_DISABLE_FIND_PACKAGE_Python3=ON -DCMAKE_DISABLE_FIND_PACKAGE_Doxygen=ON \
     -DFSDP_BUILD_FORTRAN=OFF -DFSDP_ENABLE_CUDA=OFF -DFSDP_BUILD_BENCH=OFF \
     > "$dir/configure.log" 2>&1; then
  cat "$dir/configure.log"
  echo "FAIL: the scratch tree did not configure"
  exit 1
fi
cd "$dir" || exit 1

# The tests to run, by name.
names=$({ "$ctest" -N -L 'python|pytorch'
          "$ctest" -N -R '^(test_python_capi|doc_api_reference)$'; } |
        sed -n 's/^ *Test *#[0-9]*: *//p' | sort -u)
fails=0
for must in test_pytorch_fullyshard_torch2.np2 test_pytorch_hf.np2 test_python_binding.np2 \
            test_jax_mlp.np2 test_python_capi doc_api_reference; do
  if ! grep -qx "$must" <<< "$names"; then
    echo "FAIL: $must is not registered in the scratch tree"
    fails=$((fails + 1))
  fi
done
regex="^($(sed 's/[.+]/\\&/g' <<< "$names" | paste -sd '|'))\$"
# -FA: no fixture setup pulled in (it would need the build); -j: the stand-ins take no time.
# --repeat until-pass: a stand-in under mpiexec was once killed by SIGPIPE in Hydra's output
# forwarding on this loaded machine (a failure, retried); Skipped and Passed are never repeated.
"$ctest" -R "$regex" -FA '.*' -j 2 --repeat until-pass:3 --output-on-failure > ctest.log 2>&1
# "  3/21 Test  #7: test_pytorch_hf.np2 ..............***Skipped   0.01 sec"
# (a repeated test's last result counts)
results=$(sed -n 's/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: *\([^ ]*\) [. ]*\(.*\)$/\1 \2/p' ctest.log |
          tac | awk '!seen[$1]++')
count=0
while read -r name status; do
  [ -n "$name" ] || continue
  count=$((count + 1))
  case $status in
    *Skipped*) ;;
    *) echo "FAIL: $name reports '$status' without its dependency (expected Skipped)"
       fails=$((fails + 1)) ;;
  esac
done <<< "$results"
if [ "$count" -ne "$(wc -l <<< "$names")" ]; then
  echo "FAIL: ran $count test(s) of $(wc -l <<< "$names")"
  fails=$((fails + 1))
fi
if [ $fails -ne 0 ]; then
  cat ctest.log
  exit 1
fi
echo "PASS: $count tests without their dependency report Skipped"
