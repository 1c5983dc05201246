# Runs one command-line invocation and checks its exit status and output,
# which a plain add_test cannot do together (PASS_REGULAR_EXPRESSION ignores
# the exit status).
#   cmake -DPROGRAM=... -DARGS=a,b -DSTATUS=1 [-DSTDOUT=regex] [-DSTDERR=regex] -P cli_check.cmake
# ARGS is comma-separated. The output is echoed so CTest can match it too.
string(REPLACE "," ";" args "${ARGS}")
execute_process(COMMAND "${PROGRAM}" ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit status: ${rc}\nstdout:\n${out}\nstderr:\n${err}")
if(NOT rc STREQUAL STATUS)
  message(FATAL_ERROR "expected exit status ${STATUS}, got ${rc}")
endif()
if(DEFINED STDOUT AND NOT out MATCHES "${STDOUT}")
  message(FATAL_ERROR "stdout does not match: ${STDOUT}")
endif()
if(DEFINED STDERR AND NOT err MATCHES "${STDERR}")
  message(FATAL_ERROR "stderr does not match: ${STDERR}")
endif()
