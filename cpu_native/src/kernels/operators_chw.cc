// Drivers of the CHW (planar) kernels (operators.h): work split and kernel choice.
#include <cstring>
#include <stdexcept>

#include "kernels/operators.h"
#include "kernels/thread_pool.h"

namespace edgesdk::kernels {
namespace {

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

const KernelTable& table_or_active(const KernelTable* t) { return t != nullptr ? *t : active_kernels(); }

// Work units of about this many multiply-adds, so that the pool's per-chunk cost stays small on
// the 7x7 planes of a network's last stages.
constexpr size_t kDwUnitMacs = 1 << 15;

}  // namespace

DwChwUkernel depthwise_chw_kernel(const ConvGeometry& g, const KernelTable& t, const char** name) {
  const size_t k = g.kh;
  const bool square = g.kh == g.kw && g.stride_h == g.stride_w && g.dil_h == 1 && g.dil_w == 1;
  const bool pads_fit = g.pad_top < k && g.pad_left < k && g.pad_bottom < k && g.pad_right < k;
  DwChwUkernel kernel = nullptr;
  const char* kernel_name = nullptr;
  if (square && pads_fit) {
    if (k == 3 && g.stride_h == 1) kernel = t.dwconv_chw_3x3s1, kernel_name = t.names.dwconv_chw_3x3s1;
    if (k == 3 && g.stride_h == 2) kernel = t.dwconv_chw_3x3s2, kernel_name = t.names.dwconv_chw_3x3s2;
    if (k == 5 && g.stride_h == 1) kernel = t.dwconv_chw_5x5s1, kernel_name = t.names.dwconv_chw_5x5s1;
    if (k == 5 && g.stride_h == 2) kernel = t.dwconv_chw_5x5s2, kernel_name = t.names.dwconv_chw_5x5s2;
  }
  if (kernel == nullptr) kernel = t.dwconv_chw, kernel_name = t.names.dwconv_chw;
  if (name != nullptr) *name = kernel_name;
  return kernel;
}

const char* depthwise_conv_chw(const float* input, size_t n, size_t c, size_t h, size_t w, size_t multiplier,
                               const ConvGeometry& g, const float* weights, const float* bias, float* output,
                               const Activation& act, size_t threads, const KernelTable* t) {
  require(multiplier > 0 && c > 0, "depthwise_conv_chw: empty channels");
  DwChwArgs args{};
  args.input = input;
  args.weights = weights;
  args.bias = bias;
  args.output = output;
  args.n = n; args.c = c; args.h = h; args.w = w; args.multiplier = multiplier;
  set_window(args, g, h, w);
  args.act = act;
  const char* name = nullptr;
  const DwChwUkernel kernel = depthwise_chw_kernel(g, table_or_active(t), &name);
  const size_t planes = n * c * multiplier, oh = args.oh;
  if (planes == 0 || oh == 0) return name;
  // Whole planes per unit, unless there are too few planes to keep every thread busy: then row
  // blocks of a plane (an even count, as the SIMD kernels compute output rows in pairs).
  size_t row_block = oh;
  if (threads > 1 && planes < 4 * threads) row_block = max_size(2, round_up(div_up(oh, div_up(4 * threads, planes)), 2));
  const size_t blocks = div_up(oh, row_block);
  const size_t unit_macs = max_size(1, row_block * args.ow * g.kh * g.kw);
  const size_t chunk = max_size(1, kDwUnitMacs / unit_macs);
  parallel_for(planes * blocks, threads, [&](size_t begin, size_t end) {
    for (size_t u = begin; u < end; ++u) {
      const size_t plane = u / blocks, r0 = (u % blocks) * row_block;
      kernel(&args, plane, r0, min_size(oh, r0 + row_block));
    }
  }, Partition::Dynamic, chunk);
  return name;
}

void global_avgpool_chw(const float* input, size_t n, size_t c, size_t hw, float* output, const Activation& act,
                        size_t threads, const KernelTable* t) {
  require(hw > 0, "global_avgpool_chw: empty planes");
  const GavgpoolChwUkernel kernel = table_or_active(t).gavgpool_chw;
  const size_t planes = n * c;
  const size_t per_task = max_size(1, 16384 / hw);  // planes a task pools: >= ~16K floats
  parallel_for(div_up(planes, per_task), threads, [&](size_t begin, size_t end) {
    const size_t p0 = begin * per_task, p1 = min_size(planes, end * per_task);
    kernel(input + p0 * hw, p1 - p0, hw, output + p0, &act);
  });
}

void transpose_2d(const void* src, void* dst, size_t n, size_t rows, size_t cols, size_t elem_size, size_t threads,
                  const KernelTable* t) {
  const KernelTable& tab = table_or_active(t);
  const TransposeUkernel kernel = elem_size == 1 ? tab.transpose_x8 : elem_size == 4 ? tab.transpose_f32
                                  : elem_size == 8 ? tab.transpose_x64 : nullptr;
  require(kernel != nullptr, "transpose_2d: elements must be 1, 4 or 8 bytes");
  const size_t image = rows * cols * elem_size;
  if (n == 0 || image == 0) return;
  if (rows == 1 || cols == 1) {  // the same bytes in the same order
    std::memcpy(dst, src, n * image);
    return;
  }
  // Blocks of about 16 KB each way (64 x 64 floats: source and destination blocks fit L1 together);
  // a short side takes the block's whole extent there and the other side grows to keep the size.
  const size_t side = elem_size == 1 ? 128 : elem_size == 4 ? 64 : 32;
  size_t br = min_size(rows, side), bc = min_size(cols, side);
  if (rows < side) bc = min_size(cols, round_up(side * side / rows, 16));
  if (cols < side) br = min_size(rows, round_up(side * side / cols, 16));
  const size_t rb = div_up(rows, br), cb = div_up(cols, bc), per_image = rb * cb;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  parallel_for(n * per_image, threads, [&](size_t begin, size_t end) {
    for (size_t u = begin; u < end; ++u) {
      const size_t b = u / per_image, i0 = (u % per_image) / cb * br, j0 = (u % cb) * bc;
      kernel(s + b * image + (i0 * cols + j0) * elem_size, cols, d + b * image + (j0 * rows + i0) * elem_size, rows,
             min_size(br, rows - i0), min_size(bc, cols - j0));
    }
  }, Partition::Static);
}

}  // namespace edgesdk::kernels
