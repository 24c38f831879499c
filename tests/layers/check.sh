#!/bin/sh
# The build's layer views (CMakeLists.txt vkspec_layer) refuse an include that climbs a layer: a text-layer
# file that includes runtime/ does not compile in the text layer's view, one that includes gguf/ does.
#   tests/layers/check.sh CXX BUILD_DIR
set -u
cxx=$1 build=$2 here=$(dirname "$0")
flags="-std=c++20 -fsyntax-only -I$build/layers/text -I$build/platform_include"
if ! $cxx $flags "$here/text_includes_gguf.cpp"; then
  echo "FAIL: the text layer could not include the layers below it"; exit 1
fi
if $cxx $flags "$here/text_includes_runtime.cpp" 2>"$build/layers/climb.err"; then
  echo "FAIL: the text layer included runtime/, a layer above it"; exit 1
fi
if ! grep -q 'runtime/model.h' "$build/layers/climb.err"; then
  echo "FAIL: the climbing include failed for another reason:"; cat "$build/layers/climb.err"; exit 1
fi
echo "ok: text/ sees gguf/ and core/, and runtime/model.h is not found from it"
