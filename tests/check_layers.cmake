# The layers of lib/ point one way: a folder includes only itself and the folders that
# lib/CMakeLists.txt adds before it (core first, train last). Run as a test:
#   cmake -DST_SOURCE_DIR=<source> -P tests/check_layers.cmake
# and fails naming each file that includes a folder above its own, and any folder of lib/ the
# order does not list.
if(NOT ST_SOURCE_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DST_SOURCE_DIR=<the source tree>")
endif()
cmake_minimum_required(VERSION 3.24)
set(lib "${ST_SOURCE_DIR}/lib")

# The order: the add_subdirectory() calls of lib/CMakeLists.txt, as they stand.
file(STRINGS "${lib}/CMakeLists.txt" calls REGEX "^[ \t]*add_subdirectory\\(")
set(order "")
foreach(call IN LISTS calls)
  string(REGEX REPLACE "^[ \t]*add_subdirectory\\([ \t]*([A-Za-z0-9_]+).*" "\\1" folder "${call}")
  list(APPEND order "${folder}")
endforeach()

set(problems "")
file(GLOB entries LIST_DIRECTORIES true RELATIVE "${lib}" "${lib}/*")
foreach(entry IN LISTS entries)
  if(IS_DIRECTORY "${lib}/${entry}" AND NOT entry IN_LIST order)
    list(APPEND problems "lib/${entry} is not in lib/CMakeLists.txt's order")
  endif()
endforeach()

foreach(folder IN LISTS order)
  list(FIND order "${folder}" level)
  file(GLOB_RECURSE sources RELATIVE "${lib}" "${lib}/${folder}/*.hpp" "${lib}/${folder}/*.cpp" "${lib}/${folder}/*.h"
       "${lib}/${folder}/*.cu" "${lib}/${folder}/*.cuh")
  foreach(source IN LISTS sources)
    file(STRINGS "${lib}/${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[A-Za-z0-9_]+/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([A-Za-z0-9_]+)/([^\"]*)\".*" "\\1;\\2" named "${line}")
      list(GET named 0 target)
      list(GET named 1 header)
      list(FIND order "${target}" target_level)
      if(target_level GREATER level)
        list(APPEND problems "lib/${source} includes ${target}/${header}: ${target} is above ${folder}")
      endif()
    endforeach()
  endforeach()
endforeach()

if(problems)
  list(JOIN order " <- " chain)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "lib/ includes against its layer order (${chain}; lib/CMakeLists.txt):\n  ${text}")
endif()
list(LENGTH order count)
message(STATUS "lib/: ${count} folders, each including only those below it")
