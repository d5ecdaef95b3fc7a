# Limits and hostile inputs of `fcp plan` (issue 8): every case is either
# planned correctly or rejected with exit 2 and one `error:` line; no crash.
# Included by tests/cli/CMakeLists.txt.
add_test(NAME cli_limits
         COMMAND ${FCP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/limits_test.py $<TARGET_FILE:fcp>)
set_tests_properties(cli_limits PROPERTIES LABELS cli TIMEOUT 300)
