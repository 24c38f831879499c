// The weight format a matmul shader is built for: cmake compiles one variant per format with -DWTYPE_<F>
// (q4 when none is given), and the code branches on the constant WTYPE (contract.h WT_*), so each build keeps
// only its format's code.
#include "contract.h"   // WT_* codes
#if defined(WTYPE_F32)
const uint WTYPE = WT_F32;
#elif defined(WTYPE_F16)
const uint WTYPE = WT_F16;
#elif defined(WTYPE_BF16)
const uint WTYPE = WT_BF16;
#elif defined(WTYPE_Q8)
const uint WTYPE = WT_Q8;
#elif defined(WTYPE_Q6)
const uint WTYPE = WT_Q6;
#else
const uint WTYPE = WT_Q4;
#endif
