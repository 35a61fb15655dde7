# Which MPI libfsdp is built against, and what follows from it. One owner for these rules:
#  - the MPI is the one whose C compiler wrapper CMake is given (MPI_C_COMPILER: mpicc.mpich,
#    mpicc.openmpi, a module's mpicc); `pip install .` reads it from $MPICC, else the machine's
#    default mpicc. Its launcher is the one beside it with the same Debian suffix (mpiexec.openmpi
#    for mpicc.openmpi), never the generic mpiexec that follows whichever MPI was installed last.
#  - FSDP_MPI_FLAVOR: openmpi, mpich or other, from MPI_Get_library_version.
#  - MPI's deprecated C++ bindings are never pulled in: Open MPI's mpi.h includes them in C++
#    unless OMPI_SKIP_MPICXX is defined, and they need libmpi_cxx at link time. Every target that
#    links MPI::MPI_C, and every C++ user of the installed fsdp::fsdp, gets the definitions.
#  - FSDP_HDF5_PKG: the pkg-config module of the parallel HDF5 built against that MPI.
if(SKBUILD AND NOT MPI_C_COMPILER)
  if(DEFINED ENV{MPICC} AND NOT "$ENV{MPICC}" STREQUAL "")
    find_program(_fsdp_mpicc NAMES $ENV{MPICC} NO_CACHE)
  else()
    find_program(_fsdp_mpicc NAMES mpicc NO_CACHE)
  endif()
  if(_fsdp_mpicc)
    set(MPI_C_COMPILER ${_fsdp_mpicc} CACHE FILEPATH "MPI C compiler wrapper")
  endif()
endif()
# The launcher and the Fortran wrapper of the same MPI as the C wrapper, where its name carries
# Debian's suffix (mpicc.openmpi: mpiexec.openmpi, mpifort.openmpi); a value given is kept.
if(MPI_C_COMPILER)
  get_filename_component(_fsdp_wrapper "${MPI_C_COMPILER}" NAME)
  get_filename_component(_fsdp_wrapper_dir "${MPI_C_COMPILER}" DIRECTORY)
  if(_fsdp_wrapper MATCHES "^mpicc(\\..+)$")
    set(_fsdp_suffix ${CMAKE_MATCH_1})
    foreach(_fsdp_sibling "MPIEXEC_EXECUTABLE|mpiexec|mpirun|MPI launcher"
                          "MPI_Fortran_COMPILER|mpifort|mpif90|MPI Fortran compiler wrapper")
      string(REPLACE "|" ";" _fsdp_sibling "${_fsdp_sibling}")
      list(GET _fsdp_sibling 0 _fsdp_var)
      list(GET _fsdp_sibling 1 _fsdp_name1)
      list(GET _fsdp_sibling 2 _fsdp_name2)
      list(GET _fsdp_sibling 3 _fsdp_doc)
      if(NOT ${_fsdp_var})
        find_program(_fsdp_found NAMES ${_fsdp_name1}${_fsdp_suffix} ${_fsdp_name2}${_fsdp_suffix}
                     HINTS ${_fsdp_wrapper_dir} NO_CACHE)
        if(_fsdp_found)
          set(${_fsdp_var} ${_fsdp_found} CACHE FILEPATH "${_fsdp_doc}")
        endif()
        unset(_fsdp_found)
      endif()
    endforeach()
  endif()
endif()
set(MPI_DETERMINE_LIBRARY_VERSION TRUE)  # MPI_C_LIBRARY_VERSION_STRING (runs a program)
find_package(MPI REQUIRED COMPONENTS C)
set_property(TARGET MPI::MPI_C APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS
             OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)

if(MPI_C_LIBRARY_VERSION_STRING MATCHES "Open MPI")
  set(FSDP_MPI_FLAVOR openmpi)
elseif(MPI_C_LIBRARY_VERSION_STRING MATCHES "MPICH")
  set(FSDP_MPI_FLAVOR mpich)
else()
  set(FSDP_MPI_FLAVOR other)
endif()
string(REGEX REPLACE "[\r\n].*" "" _fsdp_mpi_version "${MPI_C_LIBRARY_VERSION_STRING}")
message(STATUS "libfsdp: MPI ${FSDP_MPI_FLAVOR} (${_fsdp_mpi_version}), launcher ${MPIEXEC_EXECUTABLE}")

# Debian names parallel HDF5's pkg-config module after the MPI (libhdf5-mpich-dev: hdf5-mpich,
# libhdf5-openmpi-dev: hdf5-openmpi); elsewhere set FSDP_HDF5_PKG (a module's hdf5, say).
if(FSDP_MPI_FLAVOR STREQUAL "other")
  set(_fsdp_hdf5_default hdf5)
else()
  set(_fsdp_hdf5_default hdf5-${FSDP_MPI_FLAVOR})
endif()
set(FSDP_HDF5_PKG "${_fsdp_hdf5_default}" CACHE STRING "pkg-config module of a parallel HDF5")

# The ABI baseline (share/abi/, doc/abi.md) is per MPI: fsdp.h's calls take MPI_Comm, an int
# under MPICH and a pointer under Open MPI. MPICH's keeps the plain name. test_abi compares with
# it; `make abi-baseline` writes it (read from the cache).
if(FSDP_MPI_FLAVOR STREQUAL "mpich")
  set(_fsdp_abi_tag "")
else()
  set(_fsdp_abi_tag ".${FSDP_MPI_FLAVOR}")
endif()
set(FSDP_ABI_BASELINE
    "${PROJECT_SOURCE_DIR}/share/abi/libfsdp.so.${PROJECT_VERSION_MAJOR}${_fsdp_abi_tag}.abi"
    CACHE INTERNAL "the ABI baseline for this MPI")

# The MPI libraries libfsdp links, by FindMPI's names (name=path), for the installed CMake package:
# a project that finds MPI through it gets these, not what its own search would find (Debian's
# mpifort.openmpi names no -L for libmpi, so FindMPI's Fortran search finds the default MPI's).
# The same for fsdp-fortran.pc: the directories of those libraries outside the linker's own
# (-L flags), searched before the default MPI's /usr/lib/<arch>/libmpi.so.
set(FSDP_MPI_LIBRARY_PAIRS "")
set(FSDP_MPI_LINK_DIR_FLAGS "")
foreach(_fsdp_name IN LISTS MPI_C_LIB_NAMES)
  if(MPI_${_fsdp_name}_LIBRARY)
    list(APPEND FSDP_MPI_LIBRARY_PAIRS "${_fsdp_name}=${MPI_${_fsdp_name}_LIBRARY}")
    get_filename_component(_fsdp_dir "${MPI_${_fsdp_name}_LIBRARY}" DIRECTORY)
    if(NOT _fsdp_dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES AND
       NOT "-L${_fsdp_dir}" IN_LIST FSDP_MPI_LINK_DIR_FLAGS)
      list(APPEND FSDP_MPI_LINK_DIR_FLAGS "-L${_fsdp_dir}")
    endif()
  endif()
endforeach()
string(REPLACE ";" " " FSDP_MPI_LINK_DIR_FLAGS "${FSDP_MPI_LINK_DIR_FLAGS}")
