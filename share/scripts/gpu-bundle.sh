#!/usr/bin/env bash
# A GPU run on a machine that cannot build this project (doc/gpu.md, "The first run"): the lent GPU
# machines have CUDA, NCCL and cuBLAS but no MPICH and no parallel HDF5, and no network.
#
#   gpu-bundle.sh pack BUILD BUNDLE   (here) copy what `ctest -L gpu` and bench_gpu run out of the
#                                     CUDA build BUILD (`make gpu-check` configures one), stripped,
#                                     with the MPICH, UCX, HDF5 and other shared libraries they
#                                     link, into BUNDLE
#   gpu-bundle.sh run BUNDLE          (there, from the repository root) put the build back at its
#                                     path here, MPICH's launcher at /usr/bin, that machine's
#                                     python3 at the path of the PyTorch interpreter the build
#                                     configured (the PyTorch tests' command), and run
#                                     share/scripts/gpu-check.sh on it
#
# CUDA, NCCL and cuBLAS are taken from the machine that runs it (its driver decides which work), so
# they are never copied. The CTest files keep their absolute paths: `run` links the build's path
# here to the copy.
set -euo pipefail
mode=${1:?usage: gpu-bundle.sh pack BUILD BUNDLE | run BUNDLE}

# Libraries not copied into lib/: ours (in the build), the C runtime and the compiler's runtime
# (the machine that runs the bundle has them), and the CUDA libraries that must match its driver.
provided='^(libfsdp|linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libnccl|libcublas|libnvidia)'

# The shared libraries the programs after DIR link, less what the other machine provides, into DIR
# (a library already there is kept).
copy_libraries() {
  local dir=$1 name lib
  shift
  for lib in "$@"; do ldd "$lib"; done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
    sort -u | while read -r name lib; do
      grep -Eq "$provided" <<<"$name" || [ -e "$dir/$name" ] || cp -L "$lib" "$dir/$name"
    done
}

pack() {
  local build bundle
  build=$(cd "$1" && pwd)
  bundle=$2
  rm -rf "$bundle"
  mkdir -p "$bundle/lib" "$bundle/bin"
  echo "$build" >"$bundle/build-path"
  sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" >"$bundle/source-path"
  # The PyTorch tests (tests/test_pytorch_cuda.py) run under this interpreter's path; their
  # Python code travels with the checkout (the source path), libfsdp.so with the build.
  sed -n 's/^FSDP_TORCH_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt" >"$bundle/torch-python-path"
  # The CTest files, every directory's, so that `ctest -L gpu` finds the same tests.
  local f
  while IFS= read -r f; do
    mkdir -p "$bundle/build/$(dirname "$f")"
    cp "$build/$f" "$bundle/build/$f"
  done < <(cd "$build" && find . -name CTestTestfile.cmake)
  # The programs the GPU tests and gpu-check.sh run, and the library with its version links.
  local -a progs
  mapfile -t progs < <(cd "$build" && ctest -N -V -L gpu | sed -n 's/^[0-9]*: Test command: //p' |
    tr ' ' '\n' | tr -d '"' | grep "^$build/" | sort -u)
  progs+=("$build/tests/fsdp_gpu_probe" "$build/bench/bench_gpu")
  local p rel
  for p in "${progs[@]}" "$build"/src/libfsdp.so*; do
    [ -f "$p" ] || continue  # an argument under the build (a test's output folder), not a program
    rel=${p#"$build"/}
    mkdir -p "$bundle/build/$(dirname "$rel")"
    if [ -L "$p" ]; then cp -P "$p" "$bundle/build/$rel"; else cp "$p" "$bundle/build/$rel"; fi
    [ -L "$p" ] || strip --strip-debug "$bundle/build/$rel"
  done
  local files=()
  for p in "${progs[@]}"; do [ -f "$p" ] && files+=("$p"); done
  copy_libraries "$bundle/lib" "${files[@]}" "$build"/src/libfsdp.so
  # MPICH's launcher, its proxy, and UCX's transport modules (found beside libucs).
  cp -L "$(readlink -f "$(command -v mpiexec.mpich)")" "$bundle/bin/mpiexec.hydra"
  cp -L "$(command -v hydra_pmi_proxy)" "$bundle/bin/"
  local ucs
  ucs=$(ldconfig -p | awk '/libucs\.so\.0 .*x86-64/ && !f { print $NF; f = 1 }')
  mkdir -p "$bundle/lib/ucx"
  cp -L "$(dirname "$ucs")"/ucx/*.so.0 "$bundle/lib/ucx/"
  copy_libraries "$bundle/lib" "$bundle"/bin/* "$bundle"/lib/ucx/*.so*
  strip --strip-unneeded "$bundle"/lib/*.so* "$bundle"/lib/ucx/*.so* "$bundle"/bin/* 2>/dev/null || true
  # Compressed: what travels to a lent machine is limited (64 MiB), and libmpich alone is 40 MB.
  tar -C "$bundle" -cJf "$bundle/lib.tar.xz" lib
  rm -rf "$bundle/lib"
  du -sh "$bundle"
}

run() {
  local bundle path here
  bundle=$(cd "$1" && pwd)
  here=$(cd "$(dirname "$0")" && pwd)
  path=$(cat "$bundle/build-path")
  # The tests may read the source tree by its path here: it names this checkout there.
  local source
  source=$(cat "$bundle/source-path")
  if [ ! -e "$source" ]; then
    mkdir -p "$(dirname "$source")"
    ln -s "$(cd "$here/../.." && pwd)" "$source"
  fi
  [ -d "$bundle/lib" ] || tar -C "$bundle" -xJf "$bundle/lib.tar.xz"
  if [ "$(readlink -f "$path" 2>/dev/null)" != "$bundle/build" ]; then
    mkdir -p "$(dirname "$path")"
    rm -rf "$path"
    ln -s "$bundle/build" "$path"
  fi
  install -m 755 "$bundle/bin/mpiexec.hydra" "$bundle/bin/hydra_pmi_proxy" /usr/bin/
  # The PyTorch tests' interpreter: this machine's python3 (with its PyTorch; without one the
  # tests report skipped, which the verdict counts against a visible GPU).
  local torch_python
  torch_python=$(cat "$bundle/torch-python-path" 2>/dev/null || true)
  if [ -n "$torch_python" ] && [ ! -e "$torch_python" ] && command -v python3 >/dev/null; then
    mkdir -p "$(dirname "$torch_python")"
    ln -s "$(command -v python3)" "$torch_python"
  fi
  # NCCL and cuBLAS of this machine: the CUDA toolkit's, else the wheels beside its PyTorch.
  local cudalibs=""
  for lib in libnccl.so.2 libcublas.so.13 libcublasLt.so.13 libcudart.so.13; do
    local found
    found=$(find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/lib/x86_64-linux-gnu /opt \
      -name "$lib" 2>/dev/null | head -1 || true)
    [ -n "$found" ] && cudalibs="$cudalibs:$(dirname "$found")"
  done
  # The copied libraries reach only the bundle's programs (MPICH's launcher and what it starts,
  # and the probe), never this machine's own tools (ctest, python3).
  local env="export LD_LIBRARY_PATH='$bundle/lib$cudalibs' UCX_MODULE_DIR='$bundle/lib/ucx'"
  printf '#!/bin/sh\n%s\nexec /usr/bin/mpiexec.hydra "$@"\n' "$env" >/usr/bin/mpiexec.mpich
  chmod 755 /usr/bin/mpiexec.mpich
  local probe="$bundle/build/tests/fsdp_gpu_probe"
  [ -L "$probe.bin" ] || [ -f "$probe.bin" ] || mv "$probe" "$probe.bin"
  printf '#!/bin/sh\n%s\nexec "%s" "$@"\n' "$env" "$probe.bin" >"$probe"
  chmod 755 "$probe"
  echo "bundle: $path -> $bundle/build; $env"
  bash "$here/gpu-check.sh" "$path" /usr/bin/mpiexec.mpich
}

case $mode in
  pack) pack "${2:?BUILD}" "${3:?BUNDLE}" ;;
  run) run "${2:?BUNDLE}" ;;
  *) echo "gpu-bundle.sh: unknown mode '$mode' (pack or run)" >&2; exit 2 ;;
esac
