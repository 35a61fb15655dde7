# Sourced by the install tests: `keep`, the variables a clean environment (env -i) still passes,
# which find no libfsdp: under make sanitize the sanitizer runtime's options (and those it needs
# of UCX and hwloc, keeping its leak checks off MPI's exits), the MPI's LD_LIBRARY_PATH (an MPI
# loaded as a module finds its libraries by it) and Open MPI's OMPI_* settings (running as root,
# oversubscription). Fails (the caller's `fail`) when LD_LIBRARY_PATH names $build or $prefix.
keep=()
for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS UCX_MEM_MALLOC_HOOKS \
         UCX_MEM_MMAP_HOOK_MODE HWLOC_PLUGINS_PATH LD_LIBRARY_PATH $(compgen -e | grep '^OMPI_' || true); do
  [ -n "${!v:-}" ] && keep+=("$v=${!v}")
done
case ":${LD_LIBRARY_PATH:-}:" in
  *"$build"*|*"$prefix"*) fail "LD_LIBRARY_PATH names libfsdp's build or prefix: $LD_LIBRARY_PATH" ;;
esac
