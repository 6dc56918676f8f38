add_library(st_warnings INTERFACE)
target_compile_options(st_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast>)
if(ST_WERROR)
  target_compile_options(st_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(ST_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(ST_NATIVE)
  add_compile_options(-march=native)
endif()

# Numerical code: no FP traps and no errno from math calls, so elementwise loops (GELU, AdamW,
# softmax) vectorise. Unlike -ffast-math this keeps IEEE results for every finite input.
add_library(st_numeric INTERFACE)
target_compile_options(st_numeric INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fno-trapping-math -fno-math-errno>)
