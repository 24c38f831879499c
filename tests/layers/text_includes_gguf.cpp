// A file of the text layer may include the layers below it (tests/layers/check.sh compiles it in that view).
#include "gguf/gguf.h"
#include "text/tokenizer.h"
int main() { return 0; }
