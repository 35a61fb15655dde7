# FSDP_SANITIZE: build everything (library, tests, examples) under compiler sanitizers.
#   address,undefined  AddressSanitizer + UndefinedBehaviorSanitizer (`make sanitize`)
#   thread             ThreadSanitizer (`make tsan`: the progress thread, the watchdog, async)
# Any undefined behaviour is fatal (-fno-sanitize-recover), so a test cannot pass over one. The
# runtime options and the suppressions of third-party reports (MPICH, UCX, HDF5: not our code)
# are in share/sanitizers/ and are set on every test by fsdp_sanitize_tests().
set(FSDP_SANITIZE "" CACHE STRING "Sanitizers: address,undefined or thread (empty: none)")
if(FSDP_SANITIZE)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "FSDP_SANITIZE needs GCC or Clang")
  endif()
  set(_flags -fsanitize=${FSDP_SANITIZE} -fno-omit-frame-pointer -g)
  if(CMAKE_BUILD_TYPE STREQUAL "Debug")
    list(APPEND _flags -O1)  # assertions on, but not -O0's slowness (the suite runs 4 ranks)
  endif()
  if(FSDP_SANITIZE MATCHES "undefined")
    list(APPEND _flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX,Fortran>:${_flags}>")
  if(FSDP_SANITIZE MATCHES "undefined")
    # gfortran forms &(*a)[0] from the null data pointer of an absent optional array when it
    # passes one on (a -fdump-tree-original of the Fortran module shows it), an address never
    # used: a false "load of null pointer" report in code the compiler wrote.
    add_compile_options("$<$<COMPILE_LANGUAGE:Fortran>:-fno-sanitize=null>")
  endif()
  add_link_options(-fsanitize=${FSDP_SANITIZE})
  if(FSDP_SANITIZE MATCHES "thread")
    set(FSDP_SANITIZE_RUNTIME tsan)
  else()
    set(FSDP_SANITIZE_RUNTIME asan)
  endif()
  message(STATUS "libfsdp: sanitizers ${FSDP_SANITIZE}")
endif()

# FSDP_FUZZ: the libFuzzer targets of tests/fuzz (clang only), with everything they call
# instrumented for coverage. `make fuzz` builds them with ASan + UBSan and runs each.
option(FSDP_FUZZ "Build the libFuzzer targets (clang)" OFF)
if(FSDP_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FSDP_FUZZ needs clang (CMAKE_C_COMPILER=clang CMAKE_CXX_COMPILER=clang++)")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
endif()

# Sets the sanitizer runtime options on every test registered so far in this directory.
function(fsdp_sanitize_tests)
  if(NOT FSDP_SANITIZE)
    return()
  endif()
  set(dir ${PROJECT_SOURCE_DIR}/share/sanitizers)
  # UCX replaces malloc hooks, which fights ASan's allocator; MPICH and HDF5 keep some
  # allocations until exit (suppressed by library, see lsan.supp). hwloc's plugins (loaded by
  # MPI_Init, unloaded at exit with allocations of theirs still held, which LeakSanitizer then
  # cannot attribute to any library) are not loaded: MPICH needs no PCI or GPU topology here.
  set(env "UCX_MEM_MALLOC_HOOKS=no" "UCX_MEM_MMAP_HOOK_MODE=none" "HWLOC_PLUGINS_PATH=/nonexistent"
      "ASAN_OPTIONS=detect_leaks=1:exitcode=86:verify_asan_link_order=0:suppressions=${dir}/asan.supp"
      "LSAN_OPTIONS=suppressions=${dir}/lsan.supp:print_suppressions=0"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=${dir}/ubsan.supp"
      "TSAN_OPTIONS=halt_on_error=1:exitcode=86:suppressions=${dir}/tsan.supp")
  # A Python interpreter is not built with the sanitizer: the runtime must be loaded first, with
  # libstdc++ (its exception interceptors look for __cxa_throw at start-up).
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=lib${FSDP_SANITIZE_RUNTIME}.so
                  OUTPUT_VARIABLE runtime OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
  get_filename_component(libstdcxx ${libstdcxx} REALPATH)
  set(runtime "${runtime}:${libstdcxx}")
  get_directory_property(tests TESTS)
  foreach(t IN LISTS tests)
    set(test_env ${env})
    get_test_property(${t} LABELS labels)
    if(labels MATCHES "python")
      # ...and the interpreter's own allocations are not ours to check for leaks.
      list(TRANSFORM test_env REPLACE "detect_leaks=1" "detect_leaks=0")
      list(APPEND test_env "LD_PRELOAD=${runtime}")
    endif()
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT ${test_env})
  endforeach()
endfunction()
