# Run at every build (cmake -P): writes OUT with the checkout's commit, "-dirty" when tracked
# files differ from it, so gem --version, /props and gem bench name the code they were built
# from, not the commit of the last configure. OUT is rewritten only when the text changes.
execute_process(COMMAND git rev-parse --short=8 HEAD WORKING_DIRECTORY ${SRC_DIR}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit)
  set(commit "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC_DIR}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    string(APPEND commit "-dirty")
  endif()
endif()
file(WRITE ${OUT}.tmp "#define GEM_GIT_COMMIT \"${commit}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.tmp)
