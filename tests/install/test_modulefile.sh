#!/usr/bin/env bash
# The Lmod modulefile of the install (cmake/FsdpModulefile.cmake): installs the build tree into a
# fresh prefix, moves the prefix elsewhere, then, in a clean shell (`env -i`: PATH to MPI and the
# build tools, the MPI's own variables), loads the module with Lmod and checks what it sets:
#  - PATH, LD_LIBRARY_PATH, PKG_CONFIG_PATH, CMAKE_PREFIX_PATH, PYTHONPATH and FSDP_ROOT point into
#    the moved prefix (the modulefile finds it from its own place), and whatis/help name the MPI;
#  - the hello example built with pkg-config (no rpath: it finds libfsdp by LD_LIBRARY_PATH alone)
#    and with find_package(fsdp) (tests/install/c_only, found by CMAKE_PREFIX_PATH alone) runs on
#    2 ranks; `import libfsdp` loads the moved package through PYTHONPATH;
#  - `module unload libfsdp` takes it all back (the pkg-config program then finds no libfsdp);
#  - loaded through a symbolic link from another module tree, it still finds the prefix.
# Skipped (77) where Lmod is not installed (Debian: lmod).
#   test_modulefile.sh <build dir> <source dir> <work dir> <mpiexec> <mpicc> <mpi flavor> <python|"">
set -euo pipefail
build=$1 src=$2 work=$3 mpiexec=$4 mpicc=$5 flavor=$6 python=${7:-}
lmod_init=""
for f in ${LMOD_PKG:+"$LMOD_PKG/init/bash"} /usr/share/lmod/lmod/init/bash; do
  [ -f "$f" ] && { lmod_init=$f; break; }
done
if [ -z "$lmod_init" ]; then
  echo "skipped: Lmod is not installed (no /usr/share/lmod/lmod/init/bash; Debian: lmod)"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd -P)  # Lmod resolves symbolic links: compare physical paths
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
modfile=$(ls "$prefix"/share/modulefiles/libfsdp/*.lua 2> /dev/null || true)
[ "$(wc -w <<< "$modfile")" = 1 ] || fail "expected one share/modulefiles/libfsdp/<version>.lua, found '$modfile'"
! grep -nF -e "$prefix" -e "$build" "$modfile" || fail "$modfile names the prefix or the build tree"
libdir=$(cd "$prefix" && ls -d lib*/libfsdp.so | head -1 | xargs dirname)
pydir=""  # where the install put the package libfsdp, relative to the prefix
if [ -n "$python" ]; then
  pydir=$(cd "$prefix" && find . -path '*/libfsdp/__init__.py' | sed 's|^\./||; s|/libfsdp/__init__.py$||')
  [ -n "$pydir" ] || fail "the Python package libfsdp is not installed"
fi
moved=$work/moved/opt/libfsdp
mkdir -p "$(dirname "$moved")" && mv "$prefix" "$moved"
mkdir -p "$work/site" "$work/home" && ln -s "$moved/share/modulefiles/libfsdp" "$work/site/libfsdp"
cp "$src/examples/hello/hello.c" "$work/hello.c"

# The clean shell: Lmod, the MPI, the build tools (cmake, pkg-config, the compiler mpicc runs),
# and the MPI's own needs, as test_install.sh passes them (sanitizer options, LD_LIBRARY_PATH of an
# MPI loaded as a module, Open MPI's OMPI_* settings).
. "$src/tests/install/clean_env.sh"  # keep: what the clean environment passes
path=""
for d in "$(command -v "$mpiexec")" "$(command -v "$mpicc")" "$(command -v cmake)" \
         "$(command -v pkg-config)" /usr/bin/cc /bin/sh; do
  d=$(dirname "$d")
  case ":$path:" in *":$d:"*) ;; *) path=${path:+$path:}$d ;; esac
done

# What runs in the clean shell (its arguments are the outer script's values).
inside() {
  set -euo pipefail
  local lmod_init=$1 work=$2 moved=$3 libdir=$4 pydir=$5 src=$6 mpiexec=$7 mpicc=$8 flavor=$9
  local python=${10}
  fail() { echo "FAIL: $*"; exit 1; }
  set +u  # Lmod's scripts read unset variables
  # shellcheck source=/dev/null
  source "$lmod_init"
  set -u
  cd "$work"
  # $1 (a path list variable) holds $2 as one of its entries.
  has() { case ":${!1:-}:" in *":$2:"*) ;; *) fail "$1 does not hold $2 after module load: '${!1:-}'" ;; esac; }
  # $1 holds nothing of the moved prefix.
  hasnt() { case ":${!1:-}:" in *"$moved"*) fail "$1 still names $moved after module unload: '${!1}'" ;; esac; }
  # hello ($1) on 2 ranks of one job: each rank reads the gathered weight.
  run_hello() {
    "$mpiexec" -n 2 "$1" > "$1.log" 2>&1 || { cat "$1.log"; fail "$1 failed under $mpiexec"; }
    [ "$(grep -c '^rank [01] of 2: weight\[1\]\[2\] = 7$' "$1.log")" = 2 ] || { cat "$1.log"; fail "$1: output"; }
  }

  module use "$moved/share/modulefiles"
  module load libfsdp || fail "module load libfsdp failed"
  [ "${FSDP_ROOT:-}" = "$moved" ] || fail "FSDP_ROOT is '${FSDP_ROOT:-}', expected $moved"
  has PATH "$moved/bin"
  has LD_LIBRARY_PATH "$moved/$libdir"
  has PKG_CONFIG_PATH "$moved/$libdir/pkgconfig"
  has CMAKE_PREFIX_PATH "$moved"
  [ "$(command -v fsdp-ckpt)" = "$moved/bin/fsdp-ckpt" ] || fail "fsdp-ckpt on PATH: $(command -v fsdp-ckpt)"
  [ -f "$moved/$libdir/libfsdp.so.0" ] && [ -f "$moved/$libdir/pkgconfig/fsdp.pc" ] ||
    fail "no libfsdp.so.0 or fsdp.pc where the module points"
  local version
  version=$(pkg-config --modversion fsdp)
  local said  # Lmod writes to stderr
  said=$(module list 2>&1)
  grep -q "libfsdp/$version" <<< "$said" || fail "module list shows no libfsdp/$version: $said"
  said=$(module whatis libfsdp 2>&1)
  grep -q "MPI: $flavor" <<< "$said" || fail "module whatis does not name $flavor: $said"
  said=$(module help libfsdp 2>&1)
  grep -q "$(basename "$mpiexec")" <<< "$said" || fail "module help does not name $(basename "$mpiexec"): $said"
  echo "module load libfsdp/$version ($flavor): FSDP_ROOT, PATH, LD_LIBRARY_PATH, PKG_CONFIG_PATH, CMAKE_PREFIX_PATH in $moved"

  # pkg-config, through the module's PKG_CONFIG_PATH; no rpath: libfsdp through LD_LIBRARY_PATH.
  [ "$(readlink -f "$(pkg-config --variable=libdir fsdp)")" = "$moved/$libdir" ] ||
    fail "pkg-config's libdir is $(pkg-config --variable=libdir fsdp)"
  # shellcheck disable=SC2046  # pkg-config's flags are words
  "$mpicc" hello.c -o hello_pc $(pkg-config --cflags --libs fsdp) > pc.log 2>&1 ||
    { cat pc.log; fail "$mpicc hello.c \$(pkg-config --cflags --libs fsdp)"; }
  local dynamic loads
  dynamic=$(readelf -d hello_pc) loads=$(ldd hello_pc)
  ! grep -E 'R(UN)?PATH' <<< "$dynamic" | grep -F "$moved" || fail "hello_pc has an rpath to $moved"
  grep -qF "libfsdp.so.0 => $moved/$libdir/libfsdp.so.0" <<< "$loads" ||
    fail "hello_pc does not find libfsdp in $moved: $(grep libfsdp <<< "$loads")"
  run_hello ./hello_pc
  echo "pkg-config through the module: built, found libfsdp through LD_LIBRARY_PATH, ran on 2 ranks"

  # find_package(fsdp), through the module's CMAKE_PREFIX_PATH (none given on the command line).
  cmake -S "$src/tests/install/c_only" -B cmake_c -DEXAMPLES="$src/examples" \
    -DMPI_C_COMPILER="$mpicc" > cmake_c.cmake.log 2>&1 || { cat cmake_c.cmake.log; fail "configuring c_only"; }
  grep -q "^fsdp_DIR:PATH=$moved/" cmake_c/CMakeCache.txt ||
    fail "find_package(fsdp) found $(grep '^fsdp_DIR' cmake_c/CMakeCache.txt)"
  cmake --build cmake_c > cmake_c.build.log 2>&1 || { cat cmake_c.build.log; fail "building c_only"; }
  run_hello cmake_c/hello_c
  echo "find_package(fsdp) through the module: built and ran on 2 ranks"

  if [ -n "$python" ]; then
    has PYTHONPATH "$moved/$pydir"
    local out
    out=$("$python" -c "import libfsdp; print(libfsdp.__file__); print(libfsdp.__version__)") ||
      fail "import libfsdp through the module's PYTHONPATH"
    [ "$(sed -n 1p <<< "$out")" = "$moved/$pydir/libfsdp/__init__.py" ] || fail "imported: $out"
    [ "$(sed -n 2p <<< "$out")" = "$version" ] || fail "the package's library is version $out"
    echo "Python: import libfsdp from $moved/$pydir (library $version)"
  fi

  module unload libfsdp
  for v in PATH LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH PYTHONPATH; do hasnt $v; done
  [ -z "${FSDP_ROOT:-}" ] || fail "FSDP_ROOT still set after module unload: $FSDP_ROOT"
  local msg rc=0
  msg=$(./hello_pc 2>&1) || rc=$?
  [ "$rc" = 127 ] && grep -q "libfsdp.so.0" <<< "$msg" ||
    fail "after module unload hello_pc still ran ($rc): $msg"
  echo "module unload libfsdp: all of it gone (hello_pc no longer finds libfsdp)"

  # Through a symbolic link to the module's folder, from another module tree.
  module unuse "$moved/share/modulefiles"
  module use "$work/site"
  module load libfsdp || fail "module load libfsdp (linked) failed"
  [ "${FSDP_ROOT:-}" = "$moved" ] || fail "linked: FSDP_ROOT is '${FSDP_ROOT:-}', expected $moved"
  has LD_LIBRARY_PATH "$moved/$libdir"
  run_hello ./hello_pc
  module unload libfsdp
  hasnt PATH
  echo "through a symbolic link from another module tree: the prefix found, hello_pc ran"
}
env -i PATH="$path" HOME="$work/home" "${keep[@]}" bash -c "$(declare -f inside); inside \"\$@\"" \
  inside "$lmod_init" "$work" "$moved" "$libdir" "$pydir" "$src" "$mpiexec" "$mpicc" "$flavor" "$python"
echo "modulefile test: OK"
