# Dependencies of the Windows builds, from one prefix VKSPEC_WIN_DEPS with include/ and lib/:
#   - MinGW-w64 cross build (scripts/build-windows.sh): scripts/windows/build-deps.sh makes the prefix
#     (sentencepiece and pcre2 from Debian's source packages, GoogleTest from /usr/src/googletest, all
#     static); nlohmann-json, CLI11, Boost (Beast, Asio) and the Vulkan headers come from their Debian packages,
#     copied or linked into the build folder so that /usr/include (glibc's headers) is never on the Windows
#     compiler's path.
#   - MSVC (docs/WINDOWS.md): the Vulkan SDK's headers (find_package(Vulkan)), everything else from a vcpkg
#     tree (`vcpkg install sentencepiece pcre2 nlohmann-json cli11 boost-beast gtest --triplet x64-windows-static`,
#     VKSPEC_WIN_DEPS = its installed/x64-windows-static).
if(NOT VKSPEC_WIN_DEPS)
  message(FATAL_ERROR "VKSPEC_WIN_DEPS: the prefix with the Windows build's libraries (docs/WINDOWS.md)")
endif()
if(CMAKE_CROSSCOMPILING)
  set(win_headers ${CMAKE_BINARY_DIR}/win-headers)
  foreach(h vulkan vk_video nlohmann CLI)
    if(NOT EXISTS /usr/include/${h})
      message(FATAL_ERROR "/usr/include/${h} is missing: install the Debian packages scripts/install-deps.sh lists")
    endif()
    file(COPY /usr/include/${h} DESTINATION ${win_headers})
  endforeach()
  add_library(Vulkan::Headers INTERFACE IMPORTED)
  target_include_directories(Vulkan::Headers INTERFACE ${win_headers})
else()
  find_package(Vulkan REQUIRED)   # headers only: the loader is opened at run time (platform/)
  set(win_headers ${VKSPEC_WIN_DEPS}/include)
endif()
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${win_headers})

# Beast and Asio (the server's HTTP layer) are headers: Debian's libboost-dev, linked (not copied: 160 MB) into
# the build folder's header tree; MSVC: vcpkg's boost-beast
add_library(vkspec_beast INTERFACE)
if(CMAKE_CROSSCOMPILING)
  if(NOT EXISTS /usr/include/boost/beast.hpp)
    message(FATAL_ERROR "/usr/include/boost is missing: install libboost-dev (scripts/install-deps.sh)")
  endif()
  file(CREATE_LINK /usr/include/boost ${win_headers}/boost SYMBOLIC)
  target_include_directories(vkspec_beast INTERFACE ${win_headers})
else()
  find_package(Boost REQUIRED)
  target_link_libraries(vkspec_beast INTERFACE Boost::headers)
endif()
target_link_libraries(vkspec_beast INTERFACE ws2_32 mswsock)

find_library(VKSPEC_SPM_LIB NAMES sentencepiece libsentencepiece.a PATHS ${VKSPEC_WIN_DEPS}/lib NO_DEFAULT_PATH REQUIRED)
add_library(vkspec_sentencepiece INTERFACE)
target_include_directories(vkspec_sentencepiece INTERFACE ${VKSPEC_WIN_DEPS}/include)
target_link_libraries(vkspec_sentencepiece INTERFACE ${VKSPEC_SPM_LIB})

find_library(VKSPEC_PCRE2_LIB NAMES pcre2-8 pcre2-8-static libpcre2-8.a PATHS ${VKSPEC_WIN_DEPS}/lib NO_DEFAULT_PATH REQUIRED)
add_library(vkspec_pcre2 INTERFACE)
target_include_directories(vkspec_pcre2 INTERFACE ${VKSPEC_WIN_DEPS}/include)
target_compile_definitions(vkspec_pcre2 INTERFACE PCRE2_STATIC)
target_link_libraries(vkspec_pcre2 INTERFACE ${VKSPEC_PCRE2_LIB})

if(EXISTS ${VKSPEC_WIN_DEPS}/lib/cmake/GTest)
  set(GTest_DIR ${VKSPEC_WIN_DEPS}/lib/cmake/GTest)
elseif(EXISTS ${VKSPEC_WIN_DEPS}/share/gtest)
  set(GTest_DIR ${VKSPEC_WIN_DEPS}/share/gtest)   # vcpkg's layout
endif()
