# CLI smoke tests of the simulator commands (owner: sim). Included from
# tests/cli/CMakeLists.txt: include(${CMAKE_CURRENT_SOURCE_DIR}/sim.cmake)
add_test(NAME cli_sim_eval_paper_quick
         COMMAND $<TARGET_FILE:fcp> eval paper --quick --out ${CMAKE_CURRENT_BINARY_DIR}/eval_paper_quick)
set_tests_properties(cli_sim_eval_paper_quick PROPERTIES LABELS cli TIMEOUT 300)
add_test(NAME cli_sim_simulate_json
         COMMAND $<TARGET_FILE:fcp> simulate --dataset github --steps 1 --warmup 1 --format json -q)
set_tests_properties(cli_sim_simulate_json PROPERTIES LABELS cli
                     PASS_REGULAR_EXPRESSION "\"simulated\": true.*\"speedup_vs\"")
add_test(NAME cli_sim_simulate_bad_dataset
         COMMAND $<TARGET_FILE:fcp> simulate --dataset nope -q)
set_tests_properties(cli_sim_simulate_bad_dataset PROPERTIES LABELS cli WILL_FAIL TRUE)
