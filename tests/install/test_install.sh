#!/usr/bin/env bash
# Installs the build tree into a fresh prefix, then builds and runs the hello examples against
# the installed tree only: with find_package(fsdp) (C, and Fortran through fsdp::fortran), with
# pkg-config (fsdp.pc, fsdp-fortran.pc), and the Python binding from its installed location.
#   test_install.sh <build dir> <source dir> <work dir> <mpiexec> <mpicc> <mpifort|""> <python|"">
set -euo pipefail
build=$1 src=$2 work=$3 mpiexec=$4 mpicc=$5 mpifort=${6:-} python=${7:-}
prefix=$work/prefix
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
libdir=$(cd "$prefix" && ls -d lib*/libfsdp.so | head -1 | xargs dirname)
fail() { echo "FAIL: $*"; exit 1; }

# What must be there: header, library with its SONAME chain, tool, package files, modules.
[ -f "$prefix/include/fsdp.h" ] || fail "include/fsdp.h not installed"
soname=$(objdump -p "$prefix/$libdir/libfsdp.so" | awk '/SONAME/ {print $2}')
[ "$soname" = "libfsdp.so.0" ] || fail "SONAME is '$soname', expected libfsdp.so.0"
[ -L "$prefix/$libdir/libfsdp.so" ] && [ -L "$prefix/$libdir/$soname" ] || fail "symlinks"
[ -x "$prefix/bin/fsdp-ckpt" ] || fail "fsdp-ckpt not installed"
[ -f "$prefix/$libdir/cmake/fsdp/fsdpConfig.cmake" ] || fail "CMake package not installed"
[ -f "$prefix/$libdir/pkgconfig/fsdp.pc" ] || fail "fsdp.pc not installed"
echo "installed: header, $soname, fsdp-ckpt, CMake package, pkg-config file"

run() { "$mpiexec" -n 2 "$@"; }
# 1. CMake package.
with_fortran=OFF
[ -n "$mpifort" ] && with_fortran=ON
cmake -S "$src/tests/install" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DEXAMPLES="$src/examples" -DWITH_FORTRAN=$with_fortran -DMPI_C_COMPILER="$mpicc" \
  ${mpifort:+-DMPI_Fortran_COMPILER="$mpifort"} > "$work/cmake.log"
cmake --build "$work/cmake" > "$work/build.log"
run "$work/cmake/hello_c"
[ -n "$mpifort" ] && run "$work/cmake/hello_f"
echo "find_package(fsdp): OK"

# 2. pkg-config, with the MPI compiler wrappers.
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
# shellcheck disable=SC2046
"$mpicc" -o "$work/hello_pc" "$src/examples/hello/hello.c" $(pkg-config --cflags --libs fsdp) \
  -Wl,-rpath,"$prefix/$libdir"
run "$work/hello_pc"
if [ -n "$mpifort" ]; then
  [ -n "$(ls "$(pkg-config --variable=moddir fsdp-fortran)"/fsdp.mod)" ] || fail "fsdp.mod"
  # shellcheck disable=SC2046
  "$mpifort" -o "$work/hello_pc_f" "$src/examples/hello/hello.f90" \
    $(pkg-config --cflags --libs fsdp-fortran) -Wl,-rpath,"$prefix/$libdir"
  run "$work/hello_pc_f"
fi
echo "pkg-config: OK"

# 3. Python: the installed package finds the installed library by itself.
if [ -n "$python" ]; then
  site=$(ls -d "$prefix"/lib*/python3/site-packages)
  env -u LIBFSDP_LIBRARY PYTHONPATH="$site" "$mpiexec" -n 2 "$python" "$src/examples/hello/hello.py"
  echo "Python binding: OK"
fi
echo "install test: OK"
