# Turns one .spv file into a C++ source defining spv_<NAME> (uint32 words) and spv_<NAME>_size (bytes).
file(READ ${SPV} hex HEX)
string(LENGTH "${hex}" nchars)
math(EXPR nbytes "${nchars} / 2")
# SPIR-V words are little-endian: bytes b0 b1 b2 b3 -> 0xb3b2b1b0
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])"
       "0x\\4\\3\\2\\1u," body "${hex}")
string(REGEX REPLACE "((0x[0-9a-f]+u,){16})" "\\1\n" body "${body}")
file(WRITE ${OUT} "#include <cstddef>\n#include <cstdint>\nnamespace vkspec::shaders {\nextern const uint32_t spv_${NAME}[] = {\n${body}};\nextern const size_t spv_${NAME}_size = ${nbytes};\n}\n")
