# Turns one file into a C++ source defining `const char NAME[]` (its bytes) and `const size_t NAMESize`:
#   cmake -DIN=chat.html -DOUT=chat_page.cpp -DNAME=kChatPage -P embed_file.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" nchars)
math(EXPR nbytes "${nchars} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," body "${hex}")
string(REGEX REPLACE "(('\\\\x[0-9a-f][0-9a-f]',){24})" "\\1\n" body "${body}")
file(WRITE ${OUT} "#include <cstddef>\nextern const char ${NAME}[] = {\n${body}};\nextern const size_t ${NAME}Size = ${nbytes};\n")
