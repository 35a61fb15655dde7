#!/usr/bin/env bash
# Installs the build tree into a fresh prefix, then builds and runs the hello examples against
# the installed tree only: with find_package(fsdp) (a C and Fortran project, a C-only one, a
# Fortran-only one), with pkg-config (fsdp.pc, fsdp-fortran.pc) by the compile lines of
# doc/user-guide.md as written, and the Python binding from its installed location. Then
# moves the prefix and runs the installed programs and the Python package with `env -i` (PATH to
# MPI only): RUNPATH $ORIGIN and the package's relative library path make the install relocatable.
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
[ -x "$prefix/bin/fsdp-plan" ] || fail "fsdp-plan not installed"
[ -f "$prefix/$libdir/cmake/fsdp/fsdpConfig.cmake" ] || fail "CMake package not installed"
[ -f "$prefix/$libdir/pkgconfig/fsdp.pc" ] || fail "fsdp.pc not installed"
echo "installed: header, $soname, fsdp-ckpt, fsdp-plan, CMake package, pkg-config file"

# A built program runs on 2 ranks, after a check that it loads one MPI library (libmpi.so.N or
# libmpich.so.N, beside its Fortran ones), libfsdp's: a consumer
# that found another MPI's libmpi.so (Debian's mpifort.openmpi names no -L for its own) would
# load both, and MPI calls would land in the wrong one.
mpi_sonames() { ldd "$1" | sed -n 's/^\s*\(libmpi\(ch\)\?\.so\.[0-9]*\) .*/\1/p' | sort -u | tr '\n' ' '; }
fsdp_mpi=$(mpi_sonames "$prefix/$libdir/libfsdp.so")
run() {
  [ "$(mpi_sonames "$1")" = "$fsdp_mpi" ] || fail "$1 loads MPI libraries $(mpi_sonames "$1"), libfsdp $fsdp_mpi"
  "$mpiexec" -n 2 "$@"
}
# A CMake project of tests/install ($1) configured against the tree at $2 into $3 and built;
# the MPI wrappers are named (the generic mpicc may be another MPI's), nothing else.
consumer() {
  local project=$1 at=$2 into=$3
  shift 3
  cmake -S "$src/tests/install/$project" -B "$into" -DCMAKE_PREFIX_PATH="$at" \
    -DEXAMPLES="$src/examples" "$@" > "$into.cmake.log" 2>&1 ||
    fail "configuring tests/install/$project against $at (see $into.cmake.log)"
  cmake --build "$into" > "$into.build.log" 2>&1 ||
    fail "building tests/install/$project against $at (see $into.build.log)"
}
# A compile line of doc/user-guide.md run as it is written there, in a directory holding the
# hello example as app.c or app.f90 ($1: mpicc.mpich app.c or mpifort.mpich app.f90): the user
# guide's command is the test's, with the toolchain's defaults (GCC's --as-needed among them).
# The wrapper named there stands for this build's ($2), a shell function of the same name.
doc_build() {
  local start=$1 wrapper=$2 example=$3 into=$4 line
  line=$(grep -m1 "^ *$start " "$src/doc/user-guide.md" | sed 's/^ *//')
  [ -n "$line" ] || fail "doc/user-guide.md has no line starting '$start'"
  mkdir -p "$into" && cp "$example" "$into/${start#* }"
  ( cd "$into" && eval "${start%% *}() { command \"$wrapper\" \"\$@\"; }" && eval "$line" ) \
    > "$into.log" 2>&1 || fail "doc/user-guide.md's '$line' failed (see $into.log)"
  (cd "$into" && run ./app)
}
# 1. CMake package, 2. pkg-config (with the MPI compiler wrappers): the hello examples built
# against the tree at $1 alone, in $work/$2.
build_against() {
  local at=$1 dir=$work/$2 with_fortran=OFF
  [ -n "$mpifort" ] && with_fortran=ON
  # C and Fortran in one project; a C-only project; a Fortran-only project.
  consumer . "$at" "$dir/cmake" -DWITH_FORTRAN=$with_fortran -DMPI_C_COMPILER="$mpicc" \
    ${mpifort:+-DMPI_Fortran_COMPILER="$mpifort"}
  run "$dir/cmake/hello_c"
  [ -n "$mpifort" ] && run "$dir/cmake/hello_f"
  consumer c_only "$at" "$dir/cmake_c" -DMPI_C_COMPILER="$mpicc"
  run "$dir/cmake_c/hello_c"
  if [ -n "$mpifort" ]; then
    consumer fortran_only "$at" "$dir/cmake_f" -DMPI_Fortran_COMPILER="$mpifort"
    run "$dir/cmake_f/hello_f"
  fi
  echo "find_package(fsdp) from $at (C and Fortran, C only${mpifort:+, Fortran only}): OK"
  export PKG_CONFIG_PATH="$at/$libdir/pkgconfig"
  doc_build "mpicc.mpich app.c" "$mpicc" "$src/examples/hello/hello.c" "$dir/pc_c"
  if [ -n "$mpifort" ]; then
    [ -n "$(ls "$(pkg-config --variable=moddir fsdp-fortran)"/fsdp.mod)" ] || fail "fsdp.mod"
    doc_build "mpifort.mpich app.f90" "$mpifort" "$src/examples/hello/hello.f90" "$dir/pc_f"
  fi
  echo "pkg-config from $at, as doc/user-guide.md writes it: OK"
}
mkdir -p "$work/first"
build_against "$prefix" first

# 3. Python: the installed package finds the installed library by itself.
if [ -n "$python" ]; then
  site=$(ls -d "$prefix"/lib*/python3/site-packages)
  env -u LIBFSDP_LIBRARY PYTHONPATH="$site" "$mpiexec" -n 2 "$python" "$src/examples/hello/hello.py"
  echo "Python binding: OK"
fi
# 4. Relocatable: the prefix moved elsewhere, a clean environment (only PATH, to MPI).
moved=$work/moved/opt/libfsdp
mkdir -p "$(dirname "$moved")" && mv "$prefix" "$moved"
mkdir -p "$work/again"
build_against "$moved" again  # the CMake package and pkg-config files follow the move
mpidir=$(dirname "$(command -v "$mpiexec")")
. "$src/tests/install/clean_env.sh"  # keep: what the clean environment passes
clean() { env -i PATH="$mpidir" "${keep[@]}" "$@"; }
for exe in "$moved"/bin/fsdp-ckpt "$moved"/libexec/libfsdp/*; do
  runpath=$(readelf -d "$exe" | awk '/RUNPATH|RPATH/ {print $NF}')
  case "$runpath" in *'$ORIGIN'*) ;; *) fail "$exe: RUNPATH '$runpath' has no \$ORIGIN" ;; esac
done
if [ -x "$moved/libexec/libfsdp/fsdp_mlp" ]; then
  clean "$mpiexec" -n 2 "$moved/libexec/libfsdp/fsdp_mlp" --save "$work/mlp.h5" > "$work/mlp.log"
  clean "$moved/bin/fsdp-ckpt" verify "$work/mlp.h5" > "$work/verify.log" ||
    fail "the moved fsdp-ckpt cannot verify (see $work/verify.log)"
  echo "moved prefix: libexec/libfsdp/fsdp_mlp trained and saved, bin/fsdp-ckpt verified it"
fi
{ clean "$moved/bin/fsdp-ckpt" 2>&1 || true; } | grep -q usage || fail "the moved fsdp-ckpt does not run"
if [ -x "$moved/libexec/libfsdp/fsdp_mlp_f" ]; then
  clean "$mpiexec" -n 2 "$moved/libexec/libfsdp/fsdp_mlp_f" > "$work/mlp_f.log" ||
    fail "the moved Fortran example does not run (see $work/mlp_f.log)"
fi
if [ -n "$python" ]; then
  site=$(ls -d "$moved"/lib*/python3/site-packages)
  clean PYTHONPATH="$site" "$mpiexec" -n 2 "$python" "$src/examples/hello/hello.py"
  echo "moved prefix: Python package OK"
fi
# Bad input: the library gone from the moved prefix. A clear message naming what is missing.
mkdir -p "$work/hidden" && mv "$moved/$libdir"/libfsdp.so* "$work/hidden/"
set +e
msg=$(clean "$moved/bin/fsdp-ckpt" 2>&1); rc=$?
set -e
[ "$rc" = 127 ] && echo "$msg" | grep -q "libfsdp.so.0" || fail "without its library fsdp-ckpt said ($rc): $msg"
if [ -n "$python" ]; then
  set +e
  msg=$(clean PYTHONPATH="$site" "$python" -c "import libfsdp" 2>&1); rc=$?
  set -e
  [ "$rc" != 0 ] && echo "$msg" | grep -q "cannot load libfsdp.so" ||
    fail "without its library the Python package said ($rc): $msg"
fi
mv "$work/hidden"/libfsdp.so* "$moved/$libdir/"
echo "moved prefix without its library: the loader and the Python package name what is missing"
echo "install test: OK"
