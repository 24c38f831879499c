# The suites of the Windows build (included by tests/CMakeLists.txt when WIN32). scripts/test-windows.sh runs
# them under Wine on lavapipe, with the environment tests/CMakeLists.txt gives on Linux, and drives vkspec.exe
# itself for the CLI and the server (tests/windows/check_windows.py). The suites left out start vkspec through a
# POSIX shell or fork (test_cli, test_chat, test_server*, test_presets, test_c_api).
target_link_libraries(vkspec_testlib PUBLIC vkspec_internal GTest::gtest GTest::gtest_main)
set(VKSPEC_WINDOWS_SUITES test_platform)
foreach(name test_kernels test_kernels_pass test_gguf test_tokenizer test_constraints test_model test_speculative
             test_speculative_rejection test_draft_policy test_sampler test_batch_engine test_chat_template)
  add_executable(${name} ${name}.cpp)
  target_link_libraries(${name} PRIVATE vkspec_testlib)
  list(APPEND VKSPEC_WINDOWS_SUITES ${name})
endforeach()
target_link_libraries(test_batch_engine PRIVATE vkspec_engine)
add_executable(test_batch_prompt_cache test_batch_prompt_cache.cpp)
target_link_libraries(test_batch_prompt_cache PRIVATE vkspec_testlib vkspec_engine)
list(APPEND VKSPEC_WINDOWS_SUITES test_batch_prompt_cache)
add_executable(test_kv_admission test_kv_admission.cpp)   # (no device)
target_link_libraries(test_kv_admission PRIVATE vkspec_engine GTest::gtest GTest::gtest_main)
list(APPEND VKSPEC_WINDOWS_SUITES test_kv_admission)
target_compile_definitions(test_chat_template PRIVATE VKSPEC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
# The C API through vkspec.dll, as an application links it. (The examples are compared with vkspec.exe by
# tests/windows/check_windows.py; external_device.cpp needs a Vulkan import library MinGW does not ship.)
add_executable(test_c_api_batch test_c_api_batch.cpp test_c_api_model_io.cpp)
target_link_libraries(test_c_api_batch PRIVATE vkspec_shared vkspec_platform vkspec_gguf GTest::gtest GTest::gtest_main)
target_include_directories(test_c_api_batch PRIVATE ${CMAKE_SOURCE_DIR})
foreach(t test_c_api test_c_api_context test_c_api_external)
  add_executable(${t} ${t}.cpp)
  target_link_libraries(${t} PRIVATE vkspec_shared vkspec_platform GTest::gtest GTest::gtest_main nlohmann_json::nlohmann_json
                        Vulkan::Headers)
  target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(${t} PRIVATE VKSPEC_BIN="$<TARGET_FILE:vkspec>" EXAMPLE_GENERATE="" EXAMPLE_GENERATE_STATIC=""
                             EXAMPLE_EXTERNAL_DEVICE="" EXAMPLE_FRAME_LOOP="" VKSPEC_SHAPE_BIN="")
endforeach()
list(APPEND VKSPEC_WINDOWS_SUITES test_c_api_batch test_c_api test_c_api_context test_c_api_external)
# What scripts/test-windows.sh runs: one suite a line, with the tests it leaves out. Those compare with
# Debian's python3 (jinja2, the UTF-8 decoder) or llama.cpp (node), Linux programs whose output Wine does not
# hand back to a Windows process, need the validation layer, a Linux library that winevulkan does not offer to
# Windows programs, or run the examples of the Linux build; the Linux suites run them, and tests/windows/check_windows.py
# compares vkspec.exe's rendering of the shared chat templates with python3-jinja2's and generate.exe's text
# with the Linux example's from the Linux side.
set(exclude_test_chat_template "ChatTemplate.SharedTemplatesEqualJinja2:ChatTemplate.ConstructsEqualJinja2")
set(exclude_test_tokenizer "Tokenizer.Utf8StreamDecodesLikePython:Tokenizer.TekkenAndNoSpacePrefixMatchLlamaCpp")
set(exclude_test_kernels_pass "Validation.LayerIsOnAndCountsMessages")
set(exclude_test_c_api "CApi.ExamplesPrintWhatVkspecRunPrints")
set(suites "")
foreach(name ${VKSPEC_WINDOWS_SUITES})
  string(APPEND suites "${name} -${exclude_${name}}\n")
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/bin/suites.txt "${suites}")
