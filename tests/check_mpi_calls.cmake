# Every MPI call goes through the communication layer: outside lib/comm/ no source of lib/ or
# app/ calls an MPI_* function, save MPI-IO (MPI_File_*, and the MPI_Type_* / MPI_Info_* a file
# view needs) in lib/ckpt/ and lib/data/, which write files rather than talk to ranks. Run as a
# test:
#   cmake -DST_SOURCE_DIR=<source> -P tests/check_mpi_calls.cmake
# and fails naming file:line and the call of each one elsewhere. The helpers callers use instead
# are in lib/comm/group.hpp (rank, size, subgroups, barriers), lib/comm/values.hpp (min_over,
# max_over, sum_over, broadcasts, gathers), lib/comm/agree.hpp (agreeing on an error) and
# lib/comm/mpi_library.hpp (what the library is).
if(NOT ST_SOURCE_DIR)
  message(FATAL_ERROR "check_mpi_calls.cmake: pass -DST_SOURCE_DIR=<the source tree>")
endif()
cmake_minimum_required(VERSION 3.24)

set(call_pattern "MPI_[A-Za-z_]+[ \t]*\\(")
set(file_io_pattern "^MPI_(File|Type|Info)_")
file(GLOB_RECURSE sources RELATIVE "${ST_SOURCE_DIR}" "${ST_SOURCE_DIR}/lib/*.hpp" "${ST_SOURCE_DIR}/lib/*.cpp"
     "${ST_SOURCE_DIR}/lib/*.h" "${ST_SOURCE_DIR}/lib/*.cu" "${ST_SOURCE_DIR}/lib/*.cuh" "${ST_SOURCE_DIR}/app/*.hpp"
     "${ST_SOURCE_DIR}/app/*.cpp")
set(problems "")
set(checked 0)
foreach(source IN LISTS sources)
  if(source MATCHES "^lib/comm/")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  set(file_io_allowed FALSE)
  if(source MATCHES "^lib/(ckpt|data)/")
    set(file_io_allowed TRUE)
  endif()
  # Whole lines, numbered, so that a problem names its line. A comment that names a call with
  # its parenthesis counts as one: name it without.
  file(STRINGS "${ST_SOURCE_DIR}/${source}" lines)
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    if(NOT line MATCHES "${call_pattern}")
      continue()
    endif()
    string(REGEX MATCHALL "${call_pattern}" calls "${line}")
    foreach(call IN LISTS calls)
      string(REGEX REPLACE "[ \t]*\\($" "" call "${call}")
      if(file_io_allowed AND call MATCHES "${file_io_pattern}")
        continue()
      endif()
      list(APPEND problems "${source}:${number}: ${call}")
    endforeach()
  endforeach()
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "raw MPI calls outside lib/comm (use the helpers of lib/comm/group.hpp, values.hpp, agree.hpp, "
                      "mpi_library.hpp; MPI-IO only in lib/ckpt and lib/data):\n  ${text}")
endif()
message(STATUS "lib/ and app/: ${checked} sources outside lib/comm, no MPI call but MPI-IO")
