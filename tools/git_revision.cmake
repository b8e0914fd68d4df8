# Writes OUTPUT (a header for the `ferry` command) with the git revision of SOURCE:
#   #define FERRY_GIT_REVISION "v0.1.0-12-g1a2b3c4d5e6f-dirty"   ("" where unknown)
# Run at every build (cmake -DSOURCE=... -DOUTPUT=... -P git_revision.cmake); the
# header is rewritten only when the revision changed, so nothing rebuilds otherwise.
set(revision "")
if(EXISTS "${SOURCE}/.git")
  find_package(Git QUIET)
  if(GIT_FOUND)
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE}" describe --always --dirty --abbrev=12
                    OUTPUT_VARIABLE revision ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE status)
    if(NOT status EQUAL 0)
      set(revision "")
    endif()
  endif()
endif()
set(text "/* Written by tools/git_revision.cmake at build time. */\n#define FERRY_GIT_REVISION \"${revision}\"\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
