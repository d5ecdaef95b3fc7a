# fcp profile on the simulator with a tiny grid writes a cost model that
# fcp plan --cost-model accepts; an unknown target is a clean exit 2.
add_test(NAME cli_profile_sim_roundtrip
         COMMAND /bin/sh -c "set -e; out=$(mktemp -d); \
$<TARGET_FILE:fcp> profile --target sim:ascend910c-4x16 --lengths 4096,16384 --degrees 1,2,4 --repeats 1 --out $out/c.json >/dev/null; \
$<TARGET_FILE:fcp> plan --input ${PROJECT_SOURCE_DIR}/examples/batch.json --cost-model $out/c.json >/dev/null; rm -rf $out")
set_tests_properties(cli_profile_sim_roundtrip PROPERTIES LABELS cli TIMEOUT 120)
add_test(NAME cli_profile_bad_target COMMAND $<TARGET_FILE:fcp> profile --target gpu)
set_tests_properties(cli_profile_bad_target PROPERTIES LABELS cli WILL_FAIL TRUE)
