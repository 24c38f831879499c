# The suites of the Windows build (included by tests/CMakeLists.txt when WIN32). scripts/test-windows.sh runs
# them under Wine on lavapipe, with the environment tests/CMakeLists.txt gives on Linux, and drives vkspec.exe
# itself for the CLI and the server (tests/windows/check_windows.py). The suites left out start vkspec through a
# POSIX shell or fork (test_cli, test_chat, test_server*, test_presets, test_c_api).
target_link_libraries(vkspec_testlib PUBLIC vkspec_core GTest::gtest GTest::gtest_main)
set(VKSPEC_WINDOWS_SUITES)
foreach(name test_kernels test_gguf test_tokenizer test_constraints test_model test_speculative test_draft_policy
             test_sampler test_batch_engine test_chat_template)
  add_executable(${name} ${name}.cpp)
  target_link_libraries(${name} PRIVATE vkspec_testlib)
  list(APPEND VKSPEC_WINDOWS_SUITES ${name})
endforeach()
target_link_libraries(test_batch_engine PRIVATE vkspec_engine)
target_compile_definitions(test_chat_template PRIVATE VKSPEC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
# The C API through vkspec.dll, as an application links it.
add_executable(test_c_api_batch test_c_api_batch.cpp)
target_link_libraries(test_c_api_batch PRIVATE vkspec_shared vkspec_platform GTest::gtest GTest::gtest_main)
list(APPEND VKSPEC_WINDOWS_SUITES test_c_api_batch)
string(REPLACE ";" "\n" suites "${VKSPEC_WINDOWS_SUITES}")
file(WRITE ${CMAKE_BINARY_DIR}/bin/suites.txt "${suites}\n")   # what scripts/test-windows.sh runs
