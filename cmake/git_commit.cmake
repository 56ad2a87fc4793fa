# Writes OUT (a header defining PATHBENCH_GIT_COMMIT) from the checkout at SRC, at every build,
# touching the file only when the commit (or its "-dirty" mark) changed. The environment's
# PB_COMMIT, when set, is taken instead: a copy of the tree on a GPU machine may carry stale git
# metadata (scripts/gpu.sh and docs/gpu.md set it).
if(DEFINED ENV{PB_COMMIT})
  set(commit "$ENV{PB_COMMIT}")
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
