# ferry_forbid_targets(WHAT target...): fails the configure step if
# find_package(ferry ...) defined any of the targets, naming WHAT asked.
function(ferry_forbid_targets what)
  foreach(unwanted IN LISTS ARGN)
    if(TARGET ${unwanted})
      message(FATAL_ERROR "${what} defined ${unwanted}")
    endif()
  endforeach()
endfunction()
