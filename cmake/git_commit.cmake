# Writes OUT (a header defining PATHBENCH_GIT_COMMIT) from the checkout at SRC, and SOURCES_OUT
# (the sources' digest, below), at every build, touching each file only when its content changed.
# The environment's PB_COMMIT, when set, is taken instead of git's commit: a copy of the tree on a
# GPU machine may carry no or stale git metadata (scripts/gpu.sh and docs/gpu.md set it). It must
# look like a commit (7-40 hex digits, optionally "-dirty"): every run record is stamped with it.
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
# Writes TEXT into FILE unless FILE holds it already, so that what includes or compiles FILE is
# rebuilt only when its content changes.
function(write_if_changed file text)
  if(EXISTS ${file})
    file(READ ${file} old)
  endif()
  if(NOT "${old}" STREQUAL "${text}")
    file(WRITE ${file} "${text}")
  endif()
endfunction()
write_if_changed(${OUT} "#define PATHBENCH_GIT_COMMIT \"${commit}\"\n")

# The digest of the sources, `scripts/carry.sh digest` (the one definition of which files count),
# into SOURCES_OUT (pb::kSourcesDigest, runners/build_info.h): a file of its own, so that a changed
# source recompiles one line, not the files that print the commit.
execute_process(COMMAND bash ${SRC}/scripts/carry.sh digest OUTPUT_VARIABLE digest
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT digest MATCHES "^[0-9a-f]+$")
  message(FATAL_ERROR "scripts/carry.sh digest failed (exit ${rc}, printed '${digest}'): the build records it in every run")
endif()
write_if_changed(${SOURCES_OUT} "namespace pb {\nextern const char kSourcesDigest[];\nconst char kSourcesDigest[] = \"${digest}\";\n}  // namespace pb\n")
