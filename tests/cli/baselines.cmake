# Baseline strategies against their real counterparts (owner: baselines).
# Included from tests/cli/CMakeLists.txt.
# Against megatron-core 0.19.2's BalancedCPScheduler, in the Megatron venv.
add_test(NAME cli_megatron_dcp_oracle
         COMMAND ${FCP_MEGATRON_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/megatron_dcp_oracle.py
                 $<TARGET_FILE:fcp>)
set_tests_properties(cli_megatron_dcp_oracle PROPERTIES LABELS cli TIMEOUT 300)
add_test(NAME cli_simulate_plan_replay
         COMMAND ${FCP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/plan_replay_test.py
                 $<TARGET_FILE:fcp>)
set_tests_properties(cli_simulate_plan_replay PROPERTIES LABELS cli TIMEOUT 600)
# `fcp eval search` (the local-search reference): bounds, determinism, errors.
add_test(NAME cli_eval_search
         COMMAND ${FCP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/eval_search_test.py
                 $<TARGET_FILE:fcp>)
set_tests_properties(cli_eval_search PROPERTIES LABELS cli TIMEOUT 300)
