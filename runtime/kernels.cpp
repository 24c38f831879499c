#include "runtime/kernels.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <array>
#include <cstdio>

namespace vkspec {

namespace {
// Push-constant blocks: shaders/contract.h defines each once for GLSL and C++.
using contract::ArgmaxPC;
using contract::AttentionCombinePC;
using contract::AttentionCoopPC;
using contract::AttentionPC;
using contract::AttentionRowsPC;
using contract::EmbedPC;
using contract::MatmulPC;
using contract::MatmulRowsPC;
using contract::QuantizeX8PC;
using contract::RopeKvPC;
static_assert(sizeof(MatmulPC) <= 128 && sizeof(MatmulRowsPC) <= 128 && sizeof(RopeKvPC) <= 128 && sizeof(EmbedPC) <= 128 &&
                  sizeof(AttentionPC) <= 128 && sizeof(AttentionRowsPC) <= 128 && sizeof(contract::SpecAcceptPC) <= 128,
              "push constants: the 128 bytes every device has");
constexpr uint32_t kModeAccumulate = contract::MODE_ACCUMULATE, kModeSwiglu = contract::MODE_SWIGLU;
// Indexed by WeightFormat::storage (WT_*).
const char* const kMatmulShader[] = {"matmul_f32", "matmul_f16", "matmul_bf16", "matmul_q8", "matmul_q4", "matmul_q6"};
const char* const kMatmulTileShader[] = {"matmul_tile_f32", "matmul_tile_f16", "matmul_tile_bf16", "matmul_tile_q8",
                                         "matmul_tile_q4", "matmul_tile_q6"};
const char* const kMatmulRowsShader[] = {"matmul_rows_f32", "matmul_rows_f16", "matmul_rows_bf16", "matmul_rows_q8",
                                         "matmul_rows_q4", "matmul_rows_q6"};
const char* const kMatmulRowsX8Shader[] = {nullptr, nullptr, nullptr, "matmul_rows_q8_x8", "matmul_rows_q4_x8",
                                           "matmul_rows_q6_x8"};
// matmul_rows.comp's builds (cmake/shaders.cmake vkspec_matmul_rows_shaders), suffixed: "_t1" holds one
// token's code, "_r2" two rows per lane. Each is the full build's code specialized the same way, so the same
// bits; only the module is smaller. lavapipe translates a pipeline's whole module, dead code included,
// when the pipeline is created (its cache keeps only LLVM's code), so in every process a decode pipeline
// of the int8 q8 kernel is created ~3x faster (~180 -> ~60 ms) and a 2-row one ~3.5x (docs/PERFORMANCE.md).
// The name is written into `buf`: recording a dispatch allocates nothing.
std::string_view matmul_rows_shader(std::array<char, 48>& buf, const char* base, uint32_t tt, uint32_t rpl) {
  const int n = snprintf(buf.data(), buf.size(), "%s%s%s", base, tt == 1 ? "_t1" : "", rpl <= 2 ? "_r2" : "");
  return {buf.data(), size_t(std::min(n, int(buf.size()) - 1))};
}
// matmul_dot8.comp gathers a q6 unit's high bits for weights 8j..8j+7 with fixed masks: the even weights' at
// bits 0, 4, 16, 20 and the odd ones' at 2, 6, 18, 22 of its high-bit uint shifted by 8 (j & 1). The layout
// they read is contract.h's Q6_HIGH_SHIFT:
static_assert(Q6_HIGH_SHIFT(0) == 0 && Q6_HIGH_SHIFT(2) == 4 && Q6_HIGH_SHIFT(4) == 16 && Q6_HIGH_SHIFT(6) == 20 &&
                  Q6_HIGH_SHIFT(1) == 2 && Q6_HIGH_SHIFT(3) == 6 && Q6_HIGH_SHIFT(5) == 18 && Q6_HIGH_SHIFT(7) == 22 &&
                  Q6_HIGH_SHIFT(8) == 8 && Q6_HIGH_SHIFT(15) == 30,
              "matmul_dot8.comp's q6 high-bit masks");
const char* const kMatmulDot8Shader[] = {nullptr, nullptr, nullptr, "matmul_dot8_q8", "matmul_dot8_q4", "matmul_dot8_q6"};
const char* const kMatmulCoopShader[] = {nullptr, "matmul_coop_f16", nullptr, "matmul_coop_q8", "matmul_coop_q4", "matmul_coop_q6"};
const char* const kMatmulCoopNvShader[] = {nullptr, "matmul_coop_nv_f16", nullptr, "matmul_coop_nv_q8", "matmul_coop_nv_q4",
                                           "matmul_coop_nv_q6"};
const char* const kMatmulCoopKhrShader[] = {nullptr, "matmul_coop_khr_f16", nullptr, "matmul_coop_khr_q8", "matmul_coop_khr_q4",
                                            "matmul_coop_khr_q6"};
const uint32_t kElemsPerTexel[] = {4, 8, 8, 16, 32, 32};   // q6: of its nibble plane
static_assert(std::size(kMatmulShader) == WT_Q6 + 1 && std::size(kMatmulTileShader) == WT_Q6 + 1 &&
                  std::size(kMatmulRowsShader) == WT_Q6 + 1 && std::size(kMatmulRowsX8Shader) == WT_Q6 + 1 && std::size(kMatmulDot8Shader) == WT_Q6 + 1 &&
                  std::size(kMatmulCoopShader) == WT_Q6 + 1 && std::size(kMatmulCoopNvShader) == WT_Q6 + 1 &&
                  std::size(kMatmulCoopKhrShader) == WT_Q6 + 1 &&
                  std::size(kElemsPerTexel) == WT_Q6 + 1,
              "one entry per weight format (WT_*)");

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
// Workgroups per dispatch dimension every device takes (Vulkan's minimum maxComputeWorkGroupCount; lavapipe's
// and Intel's); a 128k-word vocabulary's output matrix has more rows.
constexpr uint32_t kMaxGroupsPerDimension = 65535;
const char* coop_shader(MatmulPath path, bool khr, uint8_t storage) {
  if (path != MatmulPath::Coopmat) return kMatmulCoopShader[storage];
  return (khr ? kMatmulCoopKhrShader : kMatmulCoopNvShader)[storage];
}

}  // namespace

KernelChoice choose_kernels(const DeviceFacts& f, KernelFamily family, MatmulPath matmul, bool prefer_khr) {
  KernelChoice c;
  c.family = family != KernelFamily::Auto ? family
             : f.prefers_row_per_lane() || !f.subgroup_shuffle ? KernelFamily::RowPerLane
                                                               : KernelFamily::Subgroup;
  // matmul.comp's lanes meet in wg_sum_pairwise, whose levels within a subgroup are shuffles
  if (c.family == KernelFamily::Subgroup && !f.subgroup_shuffle)
    c.refused = "the subgroup kernel family needs subgroup shuffles, which this device does not have (VKSPEC_KERNELS=row)";
  // The float multiply-adds stay the default until the other paths are measured faster on GPUs
  // (docs/PERFORMANCE.md; scripts/gpu/ runs both).
  c.matmul = matmul == MatmulPath::Auto ? MatmulPath::Fma : matmul;
  if (c.matmul == MatmulPath::Int8Dot && !f.integer_dot_product)
    c.refused = "VKSPEC_MATMUL=int8dot: this device has no shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product)";
  // matmul_coop.comp: subgroups of 32 own 16 rows each on the matrix units; the emulation's tiles take
  // 26 KiB of shared memory with SwiGLU
  c.coopmat_khr = c.matmul == MatmulPath::Coopmat && f.cooperative_matrix_khr && (prefer_khr || !f.cooperative_matrix_nv);
  if (c.matmul == MatmulPath::Coopmat &&
      !((f.cooperative_matrix_khr || f.cooperative_matrix_nv) && f.runs_subgroups_of(contract::COOP_SUBGROUP)))
    c.refused = "VKSPEC_MATMUL=coopmat: the matrix-unit kernels need VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix "
                "with 16x16x16 f16 x f16 + f32 tiles, f16 arithmetic, the Vulkan memory model and subgroups of 32 (the "
                "default or required through subgroupSizeControl)";
  if (c.matmul == MatmulPath::CoopmatEmulated && f.max_shared_memory < 32768)
    c.refused = "VKSPEC_MATMUL=coopmat-emulated: needs 32 KiB of shared memory per workgroup";
  return c;
}

Kernels::Kernels(VulkanDevice& ctx, Pipelines& pipelines, KernelFamily family, KernelVariants variants, MatmulPath matmul)
    : ctx_(ctx), pipelines_(pipelines) {
  const Settings settings = read_settings();   // (before the conditions below: a bad value is refused on any device)
  const KernelChoice choice = choose_kernels(ctx.facts(), family != KernelFamily::Auto ? family : settings.kernels,
                                             matmul != MatmulPath::Auto ? matmul : settings.matmul, variants.coopmat_khr);
  if (!choice.refused.empty()) throw Error(choice.refused);
  family_ = choice.family;
  matmul_ = choice.matmul;
  coopmat_khr_ = choice.coopmat_khr;
  coop_subgroup_ = matmul_ == MatmulPath::Coopmat ? contract::COOP_SUBGROUP : 0;
  using contract::MATMUL_ROW_LANES;
  static_assert((MATMUL_ROW_LANES & (MATMUL_ROW_LANES - 1)) == 0 && MATMUL_ROW_LANES <= contract::RED_SCRATCH_FLOATS &&
                    MATMUL_ROW_LANES % 4 == 0,
                "wg_sum_pairwise: a tree of whole pairs within red_scratch; matmul_tile reads its lane sums by fours");
  wg_rows_ = family_ == KernelFamily::RowPerLane ? std::max(16u, ctx.facts().subgroup_size) : MATMUL_ROW_LANES;
  const bool x8_off = !variants.int8_x, tile_off = !variants.matmul_tile;
  fma_ = variants.fma;
  x8_ = family_ == KernelFamily::RowPerLane && ctx.facts().texel_reads() && ctx.facts().subgroup_arithmetic && !x8_off;
  // matmul_tile: the sums of squares follow the sums (contract.h MATMUL_TILE_SUMS); every slot must exist
  static_assert(MATMUL_TILE_SUMS(kTileRows, kBatchTile, false) + kBatchTile <= contract::MATMUL_TILE_VALUES &&
                MATMUL_TILE_SUMS(kTileRowsSwiglu, kBatchTile, true) + kBatchTile <= contract::MATMUL_TILE_VALUES,
                "matmul_tile's reduction slots");
  tile_ = family_ == KernelFamily::Subgroup && !tile_off;
  x8_scratch_ = std::make_shared<X8Scratch>();
  scratch_arena_ = std::make_shared<Arena>(ctx, MemoryKind::Device, 4ull << 20);
  partials_ = std::make_shared<Slice>();
}

uint32_t Kernels::wg_synced(uint32_t gpu_wg) const {
  return family_ == KernelFamily::RowPerLane ? ctx_.facts().subgroup_size : gpu_wg;
}

void Kernels::embed(Recorder& r, const DeviceMatrix& table, const TokenInput& tokens, const Slice& x, uint32_t n,
                    float scale) {
  EmbedPC pc{table.data.address, table.scales.address, tokens.ids.address, x.address, table.cols, n, table.rows,
             tokens.stride, scale};
  const WeightFormat& f = table.format;
  r.dispatch(pipelines_.get("embed", {64, f.storage, f.group, f.has_min}), &pc, sizeof pc, n);
}

// Texel path (row per lane on devices that read through texel buffers): every operand must be texel-readable,
// rows must be whole texels, and quantized rows whole steps of matmul_rows.comp (contract::ROW_QUANT_STEP: a
// step's scales then lie in one or two whole texels); otherwise the device-address kernel.
static bool texel_path(KernelFamily fam, const DeviceMatrix& w, const DeviceMatrix* w2, const Slice& x,
                       uint32_t x_stride) {
  return fam == KernelFamily::RowPerLane && texel_readable(w.data) && texel_readable(x) &&
         (!w2 || texel_readable(w2->data)) &&
         w.cols % kElemsPerTexel[w.format.storage] == 0 && x_stride % 4 == 0 &&
         (!w.format.quantized() || w.cols % contract::ROW_QUANT_STEP == 0);
}

// The subgroup family's passes of several tokens: tiles of rows x tokens per workgroup (matmul_tile.comp),
// where rows are whole vec4s and the device's subgroups fit the tile's reduction slots. One token and
// everything else: matmul.comp, whose order of additions the tile keeps (batch invariance).
bool Kernels::tile_matmul(const DeviceMatrix& w, uint32_t n, uint32_t x_stride) const {
  return tile_ && n > 1 && w.cols % 4 == 0 && (x_stride ? x_stride : w.cols) % 4 == 0;
}

// The paths first (they take every width of pass), then the family's kernels: the texel one (row family) or
// tiles of several tokens (subgroup family), else the device-address kernel.
Kernels::MatmulKernel Kernels::matmul_kernel(const DeviceMatrix& w, const DeviceMatrix* w2, const MatmulInput& in,
                                             uint32_t n, uint32_t x_stride) const {
  if (dot8_matmul(w, x_stride)) return MatmulKernel::Dot8;
  if (coop_matmul(w, x_stride)) return MatmulKernel::Coop;
  if (texel_path(family_, w, w2, in.x, x_stride ? x_stride : w.cols) && (!in.norm || texel_readable(in.norm)))
    return MatmulKernel::Texel;
  return tile_matmul(w, n, x_stride) ? MatmulKernel::Tile : MatmulKernel::Plain;
}

const char* Kernels::matmul_shader(const DeviceMatrix& w, const Slice& x, uint32_t x_stride, uint32_t n) const {
  const uint8_t f = w.format.storage;
  switch (matmul_kernel(w, nullptr, MatmulInput(x), n, x_stride)) {
    case MatmulKernel::Dot8: return kMatmulDot8Shader[f];
    case MatmulKernel::Coop: return coop_shader(matmul_, coopmat_khr_, f);
    case MatmulKernel::Texel: return (x8_matmul(w) ? kMatmulRowsX8Shader : kMatmulRowsShader)[f];
    case MatmulKernel::Tile: return kMatmulTileShader[f];
    case MatmulKernel::Plain: break;
  }
  return kMatmulShader[f];
}

// Rows per lane for the texel kernel: each x texel is fetched once for all of a lane's rows (x fetches, not
// weight fetches, dominate multi-token passes). Measured on lavapipe (f16, K=384, 6 tokens): 8192 rows
// 2.47 -> 1.50 ms, 1024 rows 0.34 -> 0.23 ms; 1 token: 1.06 -> 0.77 ms, 0.18 -> 0.15 ms (1 -> 4 rows);
// 1B shape Q4_K_M: 4 -> 8 rows, prefill +25%, decode +10%. At least two workgroups (two cores here).
static uint32_t rows_per_lane(uint32_t rows, uint32_t wg) {
  for (uint32_t rpl : {8u, 4u, 2u})
    if (rows >= rpl * wg * 2) return rpl;
  return 1;
}

// What MODE_ROPE_KV's epilogue needs (Kernels::qkv_rope_store_kv).
struct RopeKvEpilogue {
  const AttentionShape& s;
  const Slice& table;
  const PagedKvView& kv;
  const KvRows& rows;
};

Slice Kernels::quantize_x8(Recorder& r, const MatmulInput& in, uint32_t K, uint32_t n, uint32_t x_stride, bool dot8) {
  using namespace contract;   // X8_ROW_TEXELS, DOT8_ROW_UINTS
  const VkDeviceSize bytes = VkDeviceSize(n) * (dot8 ? DOT8_ROW_UINTS(K) * 4 : X8_ROW_TEXELS(K) * 16);
  X8Scratch& s = *x8_scratch_;
  if (s.half < bytes) {   // grown, never shrunk or freed: recorded passes keep reading the buffer they were given
    s.half = (std::max(bytes, 2 * s.half) + 255) / 256 * 256;
    s.buffer = scratch_arena_->alloc(2 * s.half, "int8 activations");
  }
  const Slice out = s.buffer.sub(s.next * s.half, bytes);
  s.next ^= 1;
  if (dot8) {
    contract::QuantizeDot8PC pc{out.address, in.x.address, in.norm ? in.norm.address : 0, K, x_stride, in.eps};
    r.dispatch(pipelines_.get("quantize_dot8", {ctx_.facts().subgroup_size, in.norm ? 1u : 0u}), &pc, sizeof pc, n);
    r.barrier();
    return out;
  }
  QuantizeX8PC pc{out.address, texel_offset(in.x), in.norm ? texel_offset(in.norm) : 0, K, x_stride, in.eps};
  const VkBufferView views[Pipelines::kTexelBindings] = {in.x.texels, in.norm ? in.norm.texels : in.x.texels,
                                                         in.x.texels, in.x.texels};
  const Pipeline& p = pipelines_.get("quantize_x8", {ctx_.facts().subgroup_size, in.norm ? 1u : 0u},
                                     Pipelines::Layout::Texels);
  r.dispatch(p, views, &pc, sizeof pc, n);
  r.barrier();
  return out;
}

void Kernels::record_matmul(Recorder& r, const DeviceMatrix& w, const DeviceMatrix* w2, const MatmulInput& input,
                            const Slice& y, uint32_t n, uint32_t mode, uint32_t x_stride, uint32_t y_stride,
                            const RopeKvEpilogue* rope) {
  const uint32_t wg = wg_rows_;
  MatmulInput in = input;
  const WeightFormat& f = w.format;
  if (f.quantized() && w.cols % f.group != 0) throw Error("internal: quantized rows must be whole groups");
  if (w2 && !(w2->format == f)) throw Error("internal: gate and up projections in different formats");
  x_stride = x_stride ? x_stride : w.cols;
  y_stride = y_stride ? y_stride : w.rows;
  if (in.norm) mode |= contract::MODE_RMSNORM;
  const MatmulKernel kernel = matmul_kernel(w, w2, in, n, x_stride);
  if (kernel == MatmulKernel::Dot8) {   // see matmul_dot8.comp: the same kernel for one token and for tiles
    using namespace contract;   // DOT8_ROW_UINTS
    const Slice xq = quantize_x8(r, in, w.cols, n, x_stride, true);   // RMSNorm applied there
    MatmulPC pc{w.data.address, w.scales.address, w2 ? w2->data.address : 0, w2 ? w2->scales.address : 0,
                xq.address, y.address, w.rows, w.cols, n, DOT8_ROW_UINTS(w.cols), y_stride,
                mode & ~contract::MODE_RMSNORM, 0, 0.0f};
    // A row's sums do not depend on the tile (matmul_dot8.comp), so a single token takes one row per
    // workgroup, or as few more as keep the workgroups within kMaxGroupsPerDimension.
    uint32_t tt = kBatchTile, rt = w2 ? kTileRowsSwiglu : kTileRows;
    if (n == 1) {
      tt = 1;
      for (rt = 1; ceil_div(w.rows, rt) > kMaxGroupsPerDimension;) rt *= 2;
    }
    const Pipeline& p = pipelines_.get(kMatmulDot8Shader[f.storage], {contract::MATMUL_ROW_LANES, tt, rt, f.group,
                                                                      f.has_min, mode & contract::MODE_SWIGLU});
    r.dispatch(p, &pc, sizeof pc, ceil_div(w.rows, rt), ceil_div(n, tt));
    return;
  }
  if (kernel == MatmulKernel::Coop) {   // see matmul_coop.comp: the same kernel for one token and for tiles
    MatmulPC pc{w.data.address, w.scales.address, w2 ? w2->data.address : 0, w2 ? w2->scales.address : 0,
                in.x.address, y.address, w.rows, w.cols, n, x_stride, y_stride, mode,
                in.norm ? in.norm.address : 0, in.eps};
    // a row's sums depend on neither tile size: one token takes 16 rows per workgroup (a decode step's
    // matmuls spread over the device), more take COOP_ROWS
    const uint32_t bn = n <= 16 ? 16 : 32, bm = n == 1 ? 16 : contract::COOP_ROWS;
    const Pipeline& p = pipelines_.get(coop_shader(matmul_, coopmat_khr_, f.storage), {2 * bm, bn, f.group, f.has_min,
                                                mode & (contract::MODE_SWIGLU | contract::MODE_RMSNORM), bm},
                                       Pipelines::Layout::PushConstants, coop_subgroup_);
    r.dispatch(p, &pc, sizeof pc, ceil_div(w.rows, bm), ceil_div(n, bn));
    return;
  }
  if (kernel == MatmulKernel::Texel) {
    // Tiles of equal width, as few as kBatchTile allows: a tile computes TT tokens whatever n is (tokens past
    // n repeat the last), so 12 rows as two tiles of 6, not 8 + 8 (a third of the work thrown away), and a
    // verify of 6 as one tile of 6. Each token's sums do not depend on TT (batch invariance).
    const uint32_t tt = ceil_div(n, ceil_div(n, Kernels::kBatchTile));
    const bool x8 = x8_matmul(w);
    if (x8) {   // the matmul reads x as quantize_x8 wrote it, normalized already
      in = MatmulInput(quantize_x8(r, in, w.cols, n, x_stride));
      using namespace contract;   // X8_ROW_TEXELS
      x_stride = X8_ROW_TEXELS(w.cols) * 4;   // in uints, as for float x
      mode &= ~contract::MODE_RMSNORM;
    }
    const Slice& x = in.x;
    MatmulRowsPC pc{y.address, texel_offset(w.data), texel_offset(w.scales), w2 ? texel_offset(w2->data) : 0,
                    w2 ? texel_offset(w2->scales) : 0, texel_offset(x), w.rows, w.cols, n, x_stride, y_stride, mode,
                    in.norm ? texel_offset(in.norm) : 0, in.eps};
    const VkBufferView views[Pipelines::kTexelBindings] = {w.data.texels, w2 ? w2->data.texels : w.data.texels,
                                                           x.texels, in.norm ? in.norm.texels : x.texels};
    const uint32_t rpl = rows_per_lane(w.rows, wg);
    if (rope) {   // the caller checked Kernels::qkv_rope_fused
      if (rpl % 2 || w.rows % 2 || w2 || y_stride != w.rows) throw Error("internal: RoPE epilogue on a matmul without pairs");
      mode |= contract::MODE_ROPE_KV;
      pc.mode = mode;
      pc.rope = rope->table.address;
      pc.k_pool = rope->kv.k_pool.address;
      pc.v_pool = rope->kv.v_pool.address;
      pc.block_tables = rope->kv.block_tables.address;
      pc.kv_rows = rope->rows.rows.address;
      pc.q_dim = rope->s.q_dim();
      pc.n_kv_heads = rope->s.n_kv_heads;
      pc.head_dim = rope->s.head_dim;
      pc.n_rot = rope->s.n_rot;
      pc.block_size = rope->kv.block_size;
    }
    const uint32_t spec_mode = mode & (contract::MODE_SWIGLU | contract::MODE_RMSNORM | contract::MODE_ROPE_KV);
    std::array<char, 48> name;
    const Pipeline& p = pipelines_.get(matmul_rows_shader(name, (x8 ? kMatmulRowsX8Shader : kMatmulRowsShader)[f.storage], tt, rpl),
                                       {wg, tt, rpl, f.group, f.has_min, spec_mode}, Pipelines::Layout::Texels);
    r.dispatch(p, views, &pc, sizeof pc, ceil_div(w.rows, wg * rpl), ceil_div(n, tt));
    return;
  }
  MatmulPC pc{w.data.address, w.scales.address, w2 ? w2->data.address : 0, w2 ? w2->scales.address : 0,
              in.x.address, y.address, w.rows, w.cols, n, x_stride, y_stride, mode,
              in.norm ? in.norm.address : 0, in.eps};
  if (kernel == MatmulKernel::Tile) {   // see matmul_tile.comp
    const uint32_t rt = w2 ? kTileRowsSwiglu : kTileRows;
    const uint32_t spec_mode = mode & (contract::MODE_SWIGLU | contract::MODE_RMSNORM);
    const Pipeline& p = pipelines_.get(kMatmulTileShader[f.storage], {wg, kBatchTile, rt, f.group, f.has_min, spec_mode, fma_});
    r.dispatch(p, &pc, sizeof pc, ceil_div(w.rows, rt), ceil_div(n, kBatchTile));
    return;
  }
  const uint32_t tt = n == 1 ? 1 : Kernels::kBatchTile;
  const uint32_t lpr = family_ == KernelFamily::RowPerLane ? 1 : wg;
  const Pipeline& p = pipelines_.get(kMatmulShader[f.storage], {wg, tt, lpr, f.group, f.has_min, fma_});
  if (lpr == 1) {
    r.dispatch(p, &pc, sizeof pc, ceil_div(w.rows, wg), ceil_div(n, tt));
  } else {   // a workgroup per row, in z slabs of at most kMaxGroupsPerDimension
    const uint32_t slab = std::min(w.rows, kMaxGroupsPerDimension);
    r.dispatch(p, &pc, sizeof pc, slab, ceil_div(n, tt), ceil_div(w.rows, slab));
  }
}

void Kernels::matmul(Recorder& r, const DeviceMatrix& w, const MatmulInput& x, const Slice& y, uint32_t n,
                     bool accumulate, uint32_t x_stride, uint32_t y_stride) {
  record_matmul(r, w, nullptr, x, y, n, accumulate ? kModeAccumulate : 0, x_stride, y_stride);
}

void Kernels::matmul_swiglu(Recorder& r, const DeviceMatrix& gate, const DeviceMatrix& up, const MatmulInput& x,
                            const Slice& y, uint32_t n, bool gelu) {
  if (!(gate.format == up.format) || gate.rows != up.rows || gate.cols != up.cols)
    throw Error("internal: gate and up projections differ in format or shape");
  record_matmul(r, gate, &up, x, y, n, kModeSwiglu | (gelu ? contract::MODE_GELU : 0u), 0, 0);
}

void Kernels::add_rmsnorm(Recorder& r, const Slice& x, const Slice& y, const Slice& norm, uint32_t dim, float eps,
                          uint32_t n) {
  contract::AddRmsNormPC pc{x.address, y.address, norm.address, dim, eps};
  r.dispatch(pipelines_.get("add_rmsnorm", {wg_synced(256)}), &pc, sizeof pc, n);
}

void Kernels::add_bias(Recorder& r, const Slice& y, const Slice& b, uint32_t width, uint32_t stride, uint32_t n) {
  contract::BiasRowsPC pc{y.address, b.address, 0, width, stride, 0, 0};
  r.dispatch(pipelines_.get("bias_rows", {wg_synced(256)}), &pc, sizeof pc, n);
}

void Kernels::biased_glu(Recorder& r, const Slice& gu, const Slice& b, const Slice& y, uint32_t width, uint32_t n,
                         bool gelu) {
  contract::BiasRowsPC pc{y.address, b.address, gu.address, width, width, 1, gelu ? 1u : 0u};
  r.dispatch(pipelines_.get("bias_rows", {wg_synced(256)}), &pc, sizeof pc, n);
}

void Kernels::softcap(Recorder& r, const Slice& v, uint32_t count, float cap) {
  constexpr uint32_t wg = 256;
  if (ceil_div(count, wg) > 65535) throw Error("internal: softcap over more than 65535 workgroups");
  contract::SoftcapPC pc{v.address, count, cap};
  r.dispatch(pipelines_.get("softcap", {wg}), &pc, sizeof pc, ceil_div(count, wg));
}

void Kernels::rope_store_kv(Recorder& r, const AttentionShape& s, const Slice& q, const Slice& k, const Slice& v,
                            const Slice& rope_table, const PagedKvView& kv, const KvRows& rows, uint32_t n,
                            const Slice& bias, const Slice& qk_norm) {
  RopeKvPC pc{q.address, k.address, v.address, rope_table.address, kv.k_pool.address, kv.v_pool.address,
              kv.block_tables.address, rows.rows.address, s.n_heads, s.n_kv_heads, s.head_dim, s.n_rot, s.q_row(), s.kv_row(),
              bias.address, s.rope_neox ? 1u : 0u, qk_norm.address, s.norm_eps};
  r.dispatch(pipelines_.get("rope_store_kv", {64, kv.block_size}), &pc, sizeof pc, n);
}

// The texel matmul's lanes own consecutive rows, so with an even number of them (rows_per_lane >= 2) every
// rotation pair (dims 2i, 2i+1 of a head) is within a lane. The decision depends on the weights' shape and
// the device only, never on n: every pass of a model takes the same path (batch invariance).
bool Kernels::qkv_rope_fused(const DeviceMatrix& wqkv, const MatmulInput& x, const AttentionShape& s,
                             const Slice& bias, const Slice& qk_norm) const {
  return !bias && !qk_norm && !s.rope_neox && matmul_kernel(wqkv, nullptr, x, 1, 0) == MatmulKernel::Texel && rows_per_lane(wqkv.rows, wg_rows_) % 2 == 0 &&
         wqkv.rows == s.q_dim() + 2 * s.kv_dim() && s.q_row() == wqkv.rows && s.kv_row() == wqkv.rows &&
         s.head_dim % 2 == 0 && s.n_rot % 2 == 0 && s.n_rot <= s.head_dim;
}

void Kernels::qkv_rope_store_kv(Recorder& r, const DeviceMatrix& wqkv, const MatmulInput& x, const Slice& qkv,
                                uint32_t n, const AttentionShape& s, const Slice& rope_table, const PagedKvView& kv,
                                const KvRows& rows, const Slice& bias, const Slice& qk_norm) {
  if (qkv_rope_fused(wqkv, x, s, bias, qk_norm)) {
    const RopeKvEpilogue rope{s, rope_table, kv, rows};
    record_matmul(r, wqkv, nullptr, x, qkv, n, 0, 0, wqkv.rows, &rope);
    return;
  }
  matmul(r, wqkv, x, qkv, n, false, 0, wqkv.rows);
  r.barrier();
  const QkvSlices parts = qkv_slices(qkv, s);
  rope_store_kv(r, s, parts.q, parts.k, parts.v, rope_table, kv, rows, n, bias, qk_norm);
}

bool Kernels::attention_texels(const AttentionShape& s, const Slice& q, const PagedKvView& kv) const {
  return family_ == KernelFamily::RowPerLane && ctx_.facts().subgroup_shuffle && s.head_dim % 8 == 0 &&
         s.head_dim <= 256 && s.q_row() % 4 == 0 && s.n_heads / s.n_kv_heads <= 4 && texel_readable(q) &&
         texel_readable(kv.k_pool) && texel_readable(kv.v_pool) && texel_readable(kv.block_tables);
}

const char* Kernels::attention_shader(const AttentionShape& s, const Slice& q, const PagedKvView& kv) const {
  if (coop_attention(s))
    return matmul_ != MatmulPath::Coopmat ? "attention_coop" : coopmat_khr_ ? "attention_coop_khr" : "attention_coop_nv";
  return attention_texels(s, q, kv) ? "attention_rows" : "attention";
}

const Slice& Kernels::attention_partials(const AttentionShape& s, uint32_t n, uint32_t n_splits) {
  const VkDeviceSize bytes = attention_partials_bytes(s, n, n_splits);
  if (partials_->size < bytes) *partials_ = scratch_arena_->alloc(std::max(bytes, 2 * partials_->size), "attention partials");
  return *partials_;
}

void Kernels::attention(Recorder& r, const AttentionShape& s, const Slice& q, const Slice& out,
                        const PagedKvView& kv, const KvRows& rows, uint32_t n) {
  if (s.head_dim > contract::MAX_HEAD_DIM) throw Error("head_dim > " + std::to_string(contract::MAX_HEAD_DIM) + " is not supported");
  const float scale = s.scale > 0 ? s.scale : float(1.0 / std::sqrt(double(s.head_dim)));
  const uint32_t group = s.n_heads / s.n_kv_heads;
  auto combine = [&](uint32_t split, uint32_t n_splits) {
    r.barrier();
    AttentionCombinePC cpc{partials_->address, out.address, rows.rows.address, s.n_heads, s.head_dim, split, n_splits,
                           s.window};
    r.dispatch(pipelines_.get("attention_combine", {64}), &cpc, sizeof cpc, s.n_heads, n);
  };
  if (coop_attention(s)) {   // see attention_coop.comp: splits of COOP_ATTN_SPLIT keys, by position
    const uint32_t split = rows.max_len > contract::COOP_ATTN_SPLIT ? contract::COOP_ATTN_SPLIT : 0;
    const uint32_t n_splits = split ? ceil_div(rows.max_len, split) : 1;
    const Slice partials = split ? attention_partials(s, n, n_splits) : Slice{};
    AttentionCoopPC pc{q.address, out.address, kv.k_pool.address, kv.v_pool.address, kv.block_tables.address,
                       rows.rows.address, split ? partials.address : 0, s.n_heads, s.n_kv_heads, s.head_dim, scale,
                       s.q_row(), split, s.softcap, s.window, n, rows.one_sequence ? contract::COOP_ATTN_ROWS / group : 1};
    const Pipeline& p = pipelines_.get(attention_shader(s, q, kv), {contract::COOP_ATTN_WG, kv.block_size, group, s.head_dim},
                                       Pipelines::Layout::PushConstants, coop_subgroup_);
    r.dispatch(p, &pc, sizeof pc, s.n_kv_heads, ceil_div(n, pc.tile_tokens), n_splits);
    if (split) combine(split, n_splits);
    return;
  }
  if (attention_texels(s, q, kv)) {
    AttentionRowsPC pc{out.address, rows.rows.address, texel_offset(q), texel_offset(kv.k_pool), texel_offset(kv.v_pool),
                       texel_offset(kv.block_tables), s.n_heads, s.n_kv_heads, scale, s.q_row(), s.softcap, s.window};
    const VkBufferView views[Pipelines::kTexelBindings] = {q.texels, kv.k_pool.texels, kv.v_pool.texels,
                                                           kv.block_tables.texels};
    const uint32_t wg = ctx_.facts().subgroup_size;   // one subgroup (wg_synced: this path is CPU devices only)
    const Pipeline& p = pipelines_.get("attention_rows", {wg, kv.block_size, group, s.head_dim}, Pipelines::Layout::Texels);
    r.dispatch(p, views, &pc, sizeof pc, s.n_kv_heads, n);
    return;
  }
  const uint32_t wg = family_ == KernelFamily::RowPerLane ? 32 : 64;
  // A row splits when it has more keys than attention_split(); a row's splits depend only on its position, so
  // the decision for the pass (its longest row) changes nothing for a row with one split.
  const uint32_t key_split = attention_split();
  const uint32_t split = rows.max_len > key_split ? key_split : 0;
  const uint32_t n_splits = split ? ceil_div(rows.max_len, split) : 1;
  const Slice partials = split ? attention_partials(s, n, n_splits) : Slice{};
  AttentionPC pc{q.address, out.address, kv.k_pool.address, kv.v_pool.address, kv.block_tables.address,
                 rows.rows.address, split ? partials.address : 0, s.n_heads, s.n_kv_heads, s.head_dim, scale,
                 s.q_row(), split, s.softcap, s.window};
  r.dispatch(pipelines_.get("attention", {wg, kv.block_size}), &pc, sizeof pc, s.n_heads, n, n_splits);
  if (split) combine(split, n_splits);
}

// GPUs split every 64 keys: one workgroup per (head, token) walking its keys in chunks is latency-bound
// there, and a decode step has only n_heads of them. H100, 1B shape q8_0, decode tok/s with splits of
// 256 / 128 / 64 keys: 428 / 436 / 489 after a 129-token prompt, 364 / 433 / 467 after 1000 tokens. The
// partials cost n x n_heads x ceil(len / 64) x (head_dim + 2) floats (1B, 16 rows at 4096 keys: 8.6 MB).
// CPU devices keep 256: there the texel kernel (attention_rows) is the main path.
uint32_t Kernels::attention_split() const { return family_ == KernelFamily::Subgroup ? kAttentionSplitGpu : kAttentionSplit; }

void Kernels::argmax(Recorder& r, const Slice& logits, const Slice& slots, uint32_t n, uint32_t cols,
                     bool top_prob, const Slice& exclude) {
  ArgmaxPC pc{logits.address, slots.address, exclude ? exclude.address : 0, cols, top_prob ? 1u : 0u};
  // 256 lanes: a 128k-entry row is one workgroup's loop, so wider is faster on a GPU (64 lanes: 0.59 ms on an H100)
  r.dispatch(pipelines_.get("argmax", {wg_synced(256)}), &pc, sizeof pc, n);
}

void Kernels::spec_accept(Recorder& r, const contract::SpecAcceptPC& pc) {
  r.dispatch(pipelines_.get("spec_accept", {wg_synced(256)}), &pc, sizeof pc, 1);
}

}  // namespace vkspec
