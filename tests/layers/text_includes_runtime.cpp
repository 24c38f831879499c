// A file of the text layer that includes a layer above it: tests/layers/check.sh expects the compiler to
// refuse it (runtime/ is not in the text layer's view of the tree).
#include "runtime/model.h"
int main() { return 0; }
