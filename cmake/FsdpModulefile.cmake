# An Lmod modulefile for the install: <prefix>/share/modulefiles/libfsdp/<version>.lua, from
# share/modulefiles/libfsdp.lua.in (`module use <prefix>/share/modulefiles`, `module load
# libfsdp`). It sets PATH, LD_LIBRARY_PATH, PKG_CONFIG_PATH, CMAKE_PREFIX_PATH, PYTHONPATH and
# FSDP_ROOT, and names the MPI libfsdp was built against (FSDP_MPI_FLAVOR, cmake/FsdpMpi.cmake).
# Relocatable like the rest of the install: the file finds the prefix from its own location
# (Lmod's myFileName(), symbolic links followed, then up past share/modulefiles/libfsdp), and only
# the install's directories relative to the prefix are written into it.
# Included by the top-level CMakeLists.txt in its install block (not under SKBUILD: a wheel has no
# prefix to describe), after FSDP_PYTHON_DIR. Tested by tests/install/test_modulefile.sh.
set(FSDP_MODULEFILE_ROOT ${CMAKE_INSTALL_DATADIR}/modulefiles)
set(FSDP_MODULEFILE_DIR ${FSDP_MODULEFILE_ROOT}/libfsdp)

# A directory given as an absolute path cannot follow the prefix: no modulefile then.
foreach(_fsdp_var IN ITEMS CMAKE_INSTALL_BINDIR CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_DATADIR
                           CMAKE_INSTALL_DOCDIR FSDP_PYTHON_DIR)
  if(IS_ABSOLUTE "${${_fsdp_var}}")
    message(WARNING "libfsdp: ${_fsdp_var} is an absolute path (${${_fsdp_var}}): "
                    "no modulefile is installed (it locates the prefix from its own place)")
    return()
  endif()
endforeach()

# How many components of the file's path to drop for the prefix: the folder's depth, plus its name.
file(RELATIVE_PATH _fsdp_up "/${FSDP_MODULEFILE_DIR}" "/")
string(REGEX MATCHALL "\\.\\." _fsdp_up "${_fsdp_up}")
list(LENGTH _fsdp_up FSDP_MODULEFILE_UP)
math(EXPR FSDP_MODULEFILE_UP "${FSDP_MODULEFILE_UP} + 1")

# The MPI, for whatis and help: its version line, its wrapper and launcher by name.
string(REGEX REPLACE "[\r\n].*" "" FSDP_MODULEFILE_MPI "${MPI_C_LIBRARY_VERSION_STRING}")
string(REGEX REPLACE "[ \t]+" " " FSDP_MODULEFILE_MPI "${FSDP_MODULEFILE_MPI}")
string(STRIP "${FSDP_MODULEFILE_MPI}" FSDP_MODULEFILE_MPI)
string(REGEX REPLACE "[\"\\\\]" "" FSDP_MODULEFILE_MPI "${FSDP_MODULEFILE_MPI}")  # a Lua string
get_filename_component(FSDP_MODULEFILE_MPICC "${MPI_C_COMPILER}" NAME)
get_filename_component(FSDP_MODULEFILE_MPIEXEC "${MPIEXEC_EXECUTABLE}" NAME)

# PYTHONPATH where fsdp_install_python_package installs the package (only with Python 3).
if(FSDP_PYTHON_ABI)
  set(FSDP_MODULEFILE_PYTHONPATH
      "prepend_path(\"PYTHONPATH\", pathJoin(prefix, \"${FSDP_PYTHON_DIR}\"))")
else()
  set(FSDP_MODULEFILE_PYTHONPATH "-- No PYTHONPATH: built without Python 3, no Python package.")
endif()

configure_file(${PROJECT_SOURCE_DIR}/share/modulefiles/libfsdp.lua.in
               ${PROJECT_BINARY_DIR}/modulefiles/${PROJECT_VERSION}.lua @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/modulefiles/${PROJECT_VERSION}.lua
        DESTINATION ${FSDP_MODULEFILE_DIR})
