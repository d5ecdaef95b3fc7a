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
add_test(NAME cli_sim_eval_calibrate_json
         COMMAND $<TARGET_FILE:fcp> eval calibrate --format json)
set_tests_properties(cli_sim_eval_calibrate_json PROPERTIES LABELS cli
                     PASS_REGULAR_EXPRESSION "\"rows\".*\"source\".*\"config\".*\"measured\".*\"simulated\".*\"ratio\"")
add_test(NAME cli_sim_simulate_fixed_configuration
         COMMAND $<TARGET_FILE:fcp> simulate --dataset commoncrawl --model qwen3-1.7b --cluster h100-8x8
                 --ranks 8 --gbs 32 --steps 1 --warmup 0 --strategies megatron --cp 2 --mbs 2
                 --recompute none -q)
set_tests_properties(cli_sim_simulate_fixed_configuration PROPERTIES LABELS cli
                     PASS_REGULAR_EXPRESSION "recompute none.*static cp 2 \\(forced\\), static mbs 2.*physical lower bound")
add_test(NAME cli_sim_simulate_bad_recompute
         COMMAND $<TARGET_FILE:fcp> simulate --recompute some -q)
set_tests_properties(cli_sim_simulate_bad_recompute PROPERTIES LABELS cli
                     PASS_REGULAR_EXPRESSION "error: recompute: expected full, selective or none")
add_test(NAME cli_sim_simulate_length_over_limit
         COMMAND sh -c "printf '2048\\n20000000\\n' | $<TARGET_FILE:fcp> simulate --lengths - -q")
set_tests_properties(cli_sim_simulate_length_over_limit PROPERTIES LABELS cli
                     PASS_REGULAR_EXPRESSION "error: lengths\\[1\\]: 20000000 tokens exceeds the limit")
