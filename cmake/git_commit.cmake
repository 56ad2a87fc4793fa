# Writes OUT (a header defining PATHBENCH_GIT_COMMIT) from the checkout at SRC, at every build,
# touching the file only when the commit (or its "-dirty" mark) changed. The environment's
# PB_COMMIT, when set, is taken instead: a copy of the tree on a GPU machine may carry stale git
# metadata (scripts/gpu.sh and docs/gpu.md set it). It must look like a commit (7-40 hex digits,
# optionally "-dirty"): every run record is stamped with it.
if(DEFINED ENV{PB_COMMIT})
  set(commit "$ENV{PB_COMMIT}")
  string(REGEX REPLACE "-dirty$" "" hex "${commit}")
  string(LENGTH "${hex}" n)
  if(NOT hex MATCHES "^[0-9a-f]+$" OR n LESS 7 OR n GREATER 40)
    message(FATAL_ERROR "PB_COMMIT='${commit}' is not a commit: 7 to 40 hex digits (git rev-parse --short HEAD)")
  endif()
else()
  execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT commit)
    set(commit "unknown")
  else()
    execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY ${SRC} RESULT_VARIABLE dirty)
    if(NOT dirty EQUAL 0)
      set(commit "${commit}-dirty")
    endif()
  endif()
endif()
set(text "#define PATHBENCH_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
