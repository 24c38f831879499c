# Dependencies of the MinGW-w64 cross build (scripts/build-windows.sh). Libraries come from VKSPEC_WIN_DEPS
# (scripts/windows/build-deps.sh: sentencepiece, pcre2 and httplib.h from Debian's source packages, GoogleTest
# from /usr/src/googletest, all static); the other header-only ones from their Debian packages, copied into
# the build folder so that /usr/include (glibc's headers) is never on the Windows compiler's path.
if(NOT VKSPEC_WIN_DEPS)
  message(FATAL_ERROR "VKSPEC_WIN_DEPS: the prefix scripts/windows/build-deps.sh made (scripts/build-windows.sh sets it)")
endif()
set(win_headers ${CMAKE_BINARY_DIR}/win-headers)
foreach(h vulkan vk_video nlohmann CLI)
  if(NOT EXISTS /usr/include/${h})
    message(FATAL_ERROR "/usr/include/${h} is missing: install the Debian packages scripts/install-deps.sh lists")
  endif()
  file(COPY /usr/include/${h} DESTINATION ${win_headers})
endforeach()

add_library(Vulkan::Headers INTERFACE IMPORTED)
target_include_directories(Vulkan::Headers INTERFACE ${win_headers})
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${win_headers})
add_library(vkspec_httplib INTERFACE)
target_include_directories(vkspec_httplib INTERFACE ${VKSPEC_WIN_DEPS}/include)
target_link_libraries(vkspec_httplib INTERFACE ws2_32 crypt32)

find_library(VKSPEC_SPM_LIB NAMES libsentencepiece.a PATHS ${VKSPEC_WIN_DEPS}/lib NO_DEFAULT_PATH REQUIRED)
add_library(vkspec_sentencepiece INTERFACE)
target_include_directories(vkspec_sentencepiece INTERFACE ${VKSPEC_WIN_DEPS}/include)
target_link_libraries(vkspec_sentencepiece INTERFACE ${VKSPEC_SPM_LIB})

find_library(VKSPEC_PCRE2_LIB NAMES libpcre2-8.a libpcre2-8-static.a PATHS ${VKSPEC_WIN_DEPS}/lib NO_DEFAULT_PATH REQUIRED)
add_library(vkspec_pcre2 INTERFACE)
target_include_directories(vkspec_pcre2 INTERFACE ${VKSPEC_WIN_DEPS}/include)
target_compile_definitions(vkspec_pcre2 INTERFACE PCRE2_STATIC)
target_link_libraries(vkspec_pcre2 INTERFACE ${VKSPEC_PCRE2_LIB})

set(GTest_DIR ${VKSPEC_WIN_DEPS}/lib/cmake/GTest)
