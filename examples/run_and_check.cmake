# cmake -DCMD="prog|arg|..." -DEXPECT_RC=N [-DEXPECT_OUT=regex] [-DEXPECT_ERR=regex]
#       -P run_and_check.cmake
# Runs CMD and fails unless it exits with exactly EXPECT_RC (a crash is not
# "non-zero") and stdout/stderr match the given regexes.
string(REPLACE "|" ";" CMD "${CMD}")
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit: ${rc}\nstdout:\n${out}stderr:\n${err}")
if(NOT "${rc}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}")
endif()
if(DEFINED EXPECT_OUT AND NOT out MATCHES "${EXPECT_OUT}")
  message(FATAL_ERROR "stdout does not match: ${EXPECT_OUT}")
endif()
if(DEFINED EXPECT_ERR AND NOT err MATCHES "${EXPECT_ERR}")
  message(FATAL_ERROR "stderr does not match: ${EXPECT_ERR}")
endif()
