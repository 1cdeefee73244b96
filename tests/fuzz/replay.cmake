# The fuzz regression inputs (tests/fuzz/regressions/<target>/) and each target's seed corpus (the
# files tools/fuzz.sh seeds it with) replayed through the libFuzzer entry points as ordinary ctest
# cases, in every build and under ASan + UBSan in tools/asan-tests.sh: one test_fuzz_replay_<name>
# per target, tests/fuzz/replay.c as main (no libFuzzer, any compiler). Included by tests/CMakeLists.txt.
set(PZ_FZ ${CMAKE_SOURCE_DIR}/tests/fuzz)
set(PZ_REPLAY_fuzz_config ${CMAKE_SOURCE_DIR}/configs/*.json ${CMAKE_SOURCE_DIR}/tests/data/golden/*/config.json
    ${PZ_FZ}/seeds/fuzz_config/*)
set(PZ_REPLAY_fuzz_safetensors ${CMAKE_SOURCE_DIR}/tests/data/golden/*/model*.safetensors
    ${CMAKE_SOURCE_DIR}/tests/data/int4/*.safetensors)
set(PZ_REPLAY_fuzz_prompt_ids ${PZ_FZ}/seeds/fuzz_prompt_ids/*)
set(PZ_REPLAY_fuzz_tuner_table ${CMAKE_SOURCE_DIR}/src/backend/tables/*.json)
set(PZ_REPLAY_fuzz_index ${PZ_FZ}/seeds/fuzz_index/* ${CMAKE_SOURCE_DIR}/tests/data/golden/*/model.safetensors.index.json)
foreach(t fuzz_config fuzz_safetensors fuzz_prompt_ids fuzz_tuner_table fuzz_index)
  string(REPLACE "fuzz_" "test_fuzz_replay_" n ${t})
  add_executable(${n} ${PZ_FZ}/replay.c ${PZ_FZ}/${t}.c)
  target_include_directories(${n} PRIVATE ${CMAKE_SOURCE_DIR}/tools)
  target_link_libraries(${n} PRIVATE prezero)
  add_test(NAME ${n} COMMAND ${n} ${PZ_FZ}/regressions/${t}/* ${PZ_REPLAY_${t}})
  set_tests_properties(${n} PROPERTIES TIMEOUT 900)
endforeach()
# fuzz_safetensors writes each input to this file (its pid in the name); the replay removes it.
target_compile_definitions(test_fuzz_replay_safetensors PRIVATE PZ_REPLAY_SCRATCH="/tmp/pz_fuzz_st_%d.safetensors")
