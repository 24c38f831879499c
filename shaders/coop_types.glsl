// The matrix-unit builds' 16x16x16 tile types (matmul_coop.comp, attention_coop.comp; after contract.h):
// COOP_A (f16, left operand), COOP_B (f16, right operand), COOP_ACC (f32 accumulator).
// COOPMAT_NV compiles for VK_NV_cooperative_matrix. With COOPMAT_KHR_SOURCE as well, A's and B's rows are two
// specialization constants (16), which make the three types distinct in SPIR-V: cmake/spirv_coopmat_khr.py
// rewrites that module into the VK_KHR_cooperative_matrix build, whose types name their use (Debian 12's
// glslang has no GL_KHR_cooperative_matrix). The rewrite makes both plain constants again: no host sets them.
#ifdef COOPMAT_NV
#ifdef COOPMAT_KHR_SOURCE
layout(constant_id = 100) const uint COOP_ROWS_A = COOP_TILE;   // (ids above the shaders' own)
layout(constant_id = 101) const uint COOP_ROWS_B = COOP_TILE;
#define COOP_A fcoopmatNV<16, gl_ScopeSubgroup, COOP_ROWS_A, COOP_TILE>
#define COOP_B fcoopmatNV<16, gl_ScopeSubgroup, COOP_ROWS_B, COOP_TILE>
#else
#define COOP_A fcoopmatNV<16, gl_ScopeSubgroup, COOP_TILE, COOP_TILE>
#define COOP_B COOP_A
#endif
#define COOP_ACC fcoopmatNV<32, gl_ScopeSubgroup, COOP_TILE, COOP_TILE>
#endif
