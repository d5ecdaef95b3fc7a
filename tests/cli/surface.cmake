# The user's surface (issues 16 and 18): --version, defaults in every --help,
# `fcp plan` on a terminal, --trace/--plot of plan and simulate, and the shell
# injection reproducers against --plot and `eval paper --out`. Included by
# tests/cli/CMakeLists.txt.
add_test(NAME cli_surface
         COMMAND ${FCP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/surface_test.py $<TARGET_FILE:fcp>)
set_tests_properties(cli_surface PROPERTIES LABELS cli TIMEOUT 300)
