# Writes OUT (a header defining PATHBENCH_GIT_COMMIT) from the checkout at SRC, at every build,
# touching the file only when the commit (or its "-dirty" mark) changed. A copy without git
# metadata (a GPU machine's copy of the tree) takes the commit from the environment's PB_COMMIT.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if((NOT rc EQUAL 0 OR NOT commit) AND DEFINED ENV{PB_COMMIT})
  set(commit "$ENV{PB_COMMIT}")
elseif(NOT rc EQUAL 0 OR NOT commit)
  set(commit "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY ${SRC} RESULT_VARIABLE dirty)
  if(NOT dirty EQUAL 0)
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "#define PATHBENCH_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
