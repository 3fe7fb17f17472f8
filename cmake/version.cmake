# Writes OUT, a header defining MLASERVE_VERSION and MLASERVE_GIT_REVISION (`git describe` of
# SOURCE_DIR, "unknown" outside a git tree), only when its text changes. Run at every build, so
# `mlaserve --version` names the tree it was built from.
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR revision STREQUAL "")
  set(revision "unknown")
endif()
set(text "#pragma once\n#define MLASERVE_VERSION \"${VERSION}\"\n#define MLASERVE_GIT_REVISION \"${revision}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
