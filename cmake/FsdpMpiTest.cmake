# fsdp_add_mpi_test(<name> SOURCE <file> NPROCS <n>... [SUFFIX <s>] [ARGS <arg>...]
#                   [ENV <VAR=value>...] [LABELS <label>...] [SETUP <fixture>] [REQUIRES <fixture>...]
#                   [LINK <target>...])
# Builds one test program and registers it under mpiexec once per rank count, as
# <name><suffix>.np<n>. SETUP / REQUIRES: CTest fixtures (a test that writes a file / reads it).
# LINK: more libraries for the program (fsdp::fortran for a Fortran test).
# Oversubscription (4 ranks on 2 cores) must work: MPICH allows it; Open MPI needs a flag.
# FSDP_MPIEXEC_HYDRA: the launcher is MPICH's Hydra (its -disable-auto-cleanup lets a fault test's
# survivors report after a peer was killed).
if(NOT DEFINED FSDP_MPIEXEC_OVERSUBSCRIBE OR NOT DEFINED FSDP_MPIEXEC_HYDRA)
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _mpiexec_version
                  ERROR_VARIABLE _mpiexec_version RESULT_VARIABLE _ignored)
  if(_mpiexec_version MATCHES "Open MPI|OpenRTE")
    set(FSDP_MPIEXEC_OVERSUBSCRIBE --oversubscribe CACHE STRING "mpiexec flag for more ranks than cores")
  else()
    set(FSDP_MPIEXEC_OVERSUBSCRIBE "" CACHE STRING "mpiexec flag for more ranks than cores")
  endif()
  if(_mpiexec_version MATCHES "HYDRA")
    set(FSDP_MPIEXEC_HYDRA ON CACHE BOOL "mpiexec is MPICH's Hydra")
  else()
    set(FSDP_MPIEXEC_HYDRA OFF CACHE BOOL "mpiexec is MPICH's Hydra")
  endif()
endif()

function(fsdp_add_mpi_test name)
  cmake_parse_arguments(T "" "SOURCE;SUFFIX;SETUP" "NPROCS;ENV;LABELS;ARGS;REQUIRES;LINK" ${ARGN})
  if(NOT TARGET ${name})
    add_executable(${name} ${T_SOURCE})
    target_link_libraries(${name} PRIVATE fsdp::fsdp fsdp_test_harness ${T_LINK})
  endif()
  foreach(n IN LISTS T_NPROCS)
    set(test_name ${name}${T_SUFFIX}.np${n})
    add_test(NAME ${test_name}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${FSDP_MPIEXEC_OVERSUBSCRIBE}
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    # 77 on every rank: skipped (a GPU test on a machine without a GPU), never passed.
    set_tests_properties(${test_name} PROPERTIES PROCESSORS ${n} TIMEOUT 300
      LABELS "mpi;np${n};${T_LABELS}" ENVIRONMENT "${T_ENV}" SKIP_RETURN_CODE 77)
    if(T_SETUP)
      set_tests_properties(${test_name} PROPERTIES FIXTURES_SETUP ${T_SETUP})
    endif()
    if(T_REQUIRES)
      set_tests_properties(${test_name} PROPERTIES FIXTURES_REQUIRED "${T_REQUIRES}")
    endif()
    # Host tests on several ranks run once per host transport, since auto picks the node
    # shared-memory one here: again over plain MPI, with zero-copy storage, and at 4 ranks as two
    # 2-rank "nodes" (the hierarchical shared-memory path). Same files, so never at the same time.
    if(n GREATER 1 AND NOT "gpu" IN_LIST T_LABELS AND NOT T_ENV MATCHES "FSDP_TRANSPORT")
      set(variants "mpi_transport\;FSDP_TRANSPORT=mpi" "shm_zero_copy\;FSDP_TRANSPORT=shm_zero_copy")
      if(n EQUAL 4)
        list(APPEND variants "shm_2nodes\;FSDP_TRANSPORT=shm\;FSDP_RANKS_PER_NODE=2")
      endif()
      set_tests_properties(${test_name} PROPERTIES RESOURCE_LOCK ${test_name})
      foreach(variant IN LISTS variants)
        list(POP_FRONT variant tag)
        set(variant_name ${name}${T_SUFFIX}.${tag}.np${n})
        add_test(NAME ${variant_name}
          COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${FSDP_MPIEXEC_OVERSUBSCRIBE}
                  ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
        set_tests_properties(${variant_name} PROPERTIES PROCESSORS ${n} TIMEOUT 300
          LABELS "mpi;np${n};${tag};${T_LABELS}" ENVIRONMENT "${T_ENV};${variant}"
          SKIP_RETURN_CODE 77 RESOURCE_LOCK ${test_name})
        if(T_REQUIRES)
          set_tests_properties(${variant_name} PROPERTIES FIXTURES_REQUIRED "${T_REQUIRES}")
        endif()
      endforeach()
    endif()
  endforeach()
endfunction()

# fsdp_add_mpi_run(<name> NPROCS <n>... COMMAND <program> <arg>... [LABELS <label>...]
#                  [ENV <VAR=value>...])
# Registers an existing program or script (a Python example, an example binary) under mpiexec
# once per rank count, as <name>.np<n>. Exit code 77 means "skipped" (a missing optional
# dependency such as PyTorch), which CTest reports as skipped, never as passed.
function(fsdp_add_mpi_run name)
  cmake_parse_arguments(T "" "" "NPROCS;COMMAND;LABELS;ENV" ${ARGN})
  foreach(n IN LISTS T_NPROCS)
    add_test(NAME ${name}.np${n}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${FSDP_MPIEXEC_OVERSUBSCRIBE}
              ${MPIEXEC_PREFLAGS} ${T_COMMAND} ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}.np${n} PROPERTIES PROCESSORS ${n} TIMEOUT 600
      LABELS "mpi;np${n};${T_LABELS}" ENVIRONMENT "${T_ENV}" SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

# fsdp_finish_tests()
# Called at the end of each CMakeLists.txt that registers tests, over that directory's tests: what
# each test's environment needs from the MPI in use, for the scripts that start mpiexec themselves
# too. Under Open MPI: oversubscription (4 ranks on 2 cores; OMPI_MCA_rmaps_base_oversubscribe is
# --oversubscribe's parameter) and, as root, --allow-run-as-root's two variables; every test
# carries the label `openmpi` (CI's Open MPI run, doc/testing.md).
function(fsdp_finish_tests)
  if(NOT FSDP_MPI_FLAVOR STREQUAL "openmpi")
    return()
  endif()
  set(env OMPI_MCA_rmaps_base_oversubscribe=1)
  execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(uid STREQUAL "0")
    list(APPEND env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT ${env})
    set_property(TEST ${t} APPEND PROPERTY LABELS openmpi)
  endforeach()
endfunction()
