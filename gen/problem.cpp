// AttentionProblem and MergeProblem: default scale, contiguous construction,
// argument checks (both share the stride, offset and overlap rules below).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "flashgen/merge.hpp"
#include "flashgen/problem.hpp"

namespace flashgen {
namespace {

constexpr int64_t kMinHeadDim = 16;
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kHeadDimMultiple = 8;
constexpr int64_t kStrideMultiple = 8;   // 8 fp16/bf16 elements = 16 bytes
constexpr uintptr_t kTensorAlign = 16;   // Q, K, V, O base pointers
// With a window mask the kernels form i + (seqlen_k - seqlen_q) + window sizes
// clamped to the keys in 32 bits, with a tile's headroom.
constexpr int64_t kMaxWindowSeqlenSum = int64_t{2147483647} - 256;
// Packed rows are counted by int32 offsets (cu_seqlens), with a tile's headroom.
constexpr int64_t kMaxPackedRows = int64_t{2147483647} - 256;

// Saturates to the largest multiple of 8 so that a saturated stride fails the
// overflow check (with its clear message), not the multiple-of-8 rule.
int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::numeric_limits<int64_t>::max() & ~int64_t{7};
  return r;
}

[[noreturn]] void fail(const std::string& message) { throw InvalidArgument(message); }

std::string ptr_text(const void* p) { return fmt::format("{}", p); }

// Largest byte offset of a strided tensor: sum over dims of (extent-1)*stride,
// plus the contiguous last dim, times the element size. Every extent is >= 1
// and every stride >= 0 here. Returns false on signed 64-bit overflow.
struct Dim {
  int64_t extent;
  int64_t stride;
};
bool max_byte_offset(std::initializer_list<Dim> dims, int64_t elem_bytes, int64_t* out) {
  int64_t total = 0;
  for (const Dim& d : dims) {
    int64_t term;
    if (__builtin_mul_overflow(d.extent - 1, d.stride, &term)) return false;
    if (__builtin_add_overflow(total, term, &total)) return false;
  }
  // + 1 so that the end of the last element is addressable too.
  if (__builtin_add_overflow(total, int64_t{1}, &total)) return false;
  return !__builtin_mul_overflow(total, elem_bytes, out);
}

// An output view must give every element its own address. The rule used
// (sufficient, and what any BSHD-like layout satisfies): with the dimensions
// of extent > 1 taken in order of increasing stride, each stride is at least
// the span of everything nested inside it, starting from the contiguous
// innermost extent. Strides of 0 are refused before (an output cannot
// broadcast). `inner`/`inner_name`: the contiguous innermost extent and its
// name; `dims`: the strided dimensions.
struct OutDim {
  const char* field;        // e.g. "stride_head"
  int64_t stride;
  int64_t extent;
  const char* extent_name;  // e.g. "heads_q"
};
[[noreturn]] void fail_self_overlap(const char* name, const OutDim* dims, size_t bad, int64_t inner,
                                    const char* inner_name, std::initializer_list<OutDim> all) {
  // The message (cold path): the spans of the dimensions nested inside dims[bad].
  std::string formula = inner_name;
  std::string values = fmt::format("{}", inner);
  int64_t span = inner;
  for (size_t i = 0; i < bad; ++i) {
    span = dims[i].stride * (dims[i].extent - 1) + span;
    formula = fmt::format("({}-1)*{}.{} + {}", dims[i].extent_name, name, dims[i].field, formula);
    values = fmt::format("({}-1)*{} + {}", dims[i].extent, dims[i].stride, values);
  }
  const OutDim& d = dims[bad];
  // With a nested dimension of the same or a larger stride, either stride may be the wrong one.
  const std::string which = bad == 0 || dims[bad - 1].stride < d.stride
                                ? fmt::format("{}.{} ({})", name, d.field, d.stride)
                                : fmt::format("{}.{} ({}) or {}.{} ({})", name, d.field, d.stride, name,
                                              dims[bad - 1].field, dims[bad - 1].stride);
  // The contiguous layout's rule, innermost first (`all` lists the dimensions outermost first).
  std::string nest;
  const OutDim* prev = nullptr;
  for (auto it = std::rbegin(all); it != std::rend(all); ++it) {
    nest += fmt::format("{}{} >= {}", nest.empty() ? "" : ", ", it->field,
                        prev == nullptr ? std::string(inner_name) : fmt::format("{} * {}", prev->extent_name, prev->field));
    prev = &*it;
  }
  fail(fmt::format("{}.{} ({}) is smaller than the {} elements it must step over ({} = {}): "
                   "elements of {} would overlap (change {}); output strides must nest without "
                   "overlap (contiguous: {})",
                   name, d.field, d.stride, span, formula, values, name, which, nest));
}

// (runs on every launch: no allocation, no formatting unless it fails)
void check_no_self_overlap(const char* name, std::initializer_list<OutDim> all, int64_t inner,
                           const char* inner_name) {
  std::array<OutDim, 4> dims{};
  size_t n = 0;
  for (const OutDim& d : all)
    if (d.extent > 1 && n < dims.size()) dims[n++] = d;
  std::stable_sort(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(n),
                   [](const OutDim& a, const OutDim& b) { return a.stride < b.stride; });
  int64_t span = inner;  // elements covered by the dimensions nested so far
  for (size_t i = 0; i < n; ++i) {
    if (dims[i].stride < span) fail_self_overlap(name, dims.data(), i, inner, inner_name, all);
    // Cannot overflow: max_byte_offset bounded the sum of all such terms.
    span = dims[i].stride * (dims[i].extent - 1) + span;
  }
}

void check_head_dim(const char* name, int64_t v) {
  if (v < kMinHeadDim || v > kMaxHeadDim || v % kHeadDimMultiple != 0) {
    fail(fmt::format("{} ({}) must be a multiple of {} in [{}, {}]", name, v, kHeadDimMultiple,
                     kMinHeadDim, kMaxHeadDim));
  }
}

// The byte range [begin, end) a view spans (end = begin + largest byte offset).
struct ByteRange {
  const char* name;
  uintptr_t begin;
  uintptr_t end;
};

// `rule`: the sentence that says why the two must not share a byte.
void check_disjoint(const ByteRange& out, const ByteRange& other,
                    const char* rule = "the outputs of a merge must not overlap its inputs or each other") {
  if (out.begin < other.end && other.begin < out.end) {
    fail(fmt::format("{} (bytes [{:#x}, {:#x})) overlaps {} (bytes [{:#x}, {:#x})); {}", out.name, out.begin,
                     out.end, other.name, other.begin, other.end, rule));
  }
}

// Checks one of Q, K, V, O. `needed`: the tensor has at least one element the
// kernel touches (so its pointer must be valid). `is_output`: no broadcasting.
// Returns the bytes the view spans from its data pointer (0 when not needed).
int64_t check_tensor(const char* name, const TensorRef& t, bool needed, bool is_output, int64_t batch,
                  int64_t seqlen, const char* seqlen_name, int64_t heads, const char* heads_name,
                  int64_t dim, const char* dim_name) {
  const struct {
    const char* field;
    int64_t value;
    int64_t extent;
    const char* extent_name;
  } strides[] = {{"stride_batch", t.stride_batch, batch, "batch"},
                 {"stride_seq", t.stride_seq, seqlen, seqlen_name},
                 {"stride_head", t.stride_head, heads, heads_name}};
  for (const auto& s : strides) {
    if (s.value < 0) {
      fail(fmt::format("{}.{} ({}) must be >= 0; negative strides are not supported", name, s.field,
                       s.value));
    }
    if (s.value % kStrideMultiple != 0) {
      fail(fmt::format("{}.{} ({}) must be a multiple of {} elements (16 bytes) or 0", name, s.field,
                       s.value, kStrideMultiple));
    }
  }
  if (!needed) return 0;
  if (t.data == nullptr) {
    fail(fmt::format("{}.data is null; a non-empty problem (batch {}, {} {}) needs a device pointer",
                     name, batch, seqlen_name, seqlen));
  }
  if (reinterpret_cast<uintptr_t>(t.data) % kTensorAlign != 0) {
    fail(fmt::format("{}.data ({}) must be {}-byte aligned", name, ptr_text(t.data), kTensorAlign));
  }
  if (is_output) {
    for (const auto& s : strides) {
      if (s.value == 0 && s.extent > 1) {
        fail(fmt::format("{}.{} (0) must be positive when {} ({}) > 1: an output cannot broadcast",
                         name, s.field, s.extent_name, s.extent));
      }
    }
  }
  int64_t bytes;
  if (!max_byte_offset({{batch, t.stride_batch}, {seqlen, t.stride_seq}, {heads, t.stride_head},
                        {dim, 1}},
                       2, &bytes)) {
    fail(fmt::format("{}: the largest offset (batch-1)*stride_batch + ({}-1)*stride_seq + "
                     "({}-1)*stride_head + {} = ({}-1)*{} + ({}-1)*{} + ({}-1)*{} + {} elements "
                     "overflows a signed 64-bit byte offset",
                     name, seqlen_name, heads_name, dim_name, batch, t.stride_batch, seqlen,
                     t.stride_seq, heads, t.stride_head, dim));
  }
  if (is_output) {
    check_no_self_overlap(name,
                          {{"stride_batch", t.stride_batch, batch, "batch"},
                           {"stride_seq", t.stride_seq, seqlen, seqlen_name},
                           {"stride_head", t.stride_head, heads, heads_name}},
                          dim, dim_name);
  }
  return bytes;
}

}  // namespace

float AttentionProblem::scale() const {
  if (softmax_scale) return *softmax_scale;
  if (head_dim <= 0) return 1.0f;
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

AttentionProblem make_bshd_problem(DType dtype, int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
                                   int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                                   int64_t head_dim_v, MaskKind mask, const void* q, const void* k,
                                   const void* v, void* o) {
  AttentionProblem p;
  p.dtype = dtype;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  p.mask = mask;
  // Saturating products: absurd sizes give strides check_problem rejects
  // (overflow) instead of undefined behaviour here.
  auto fill = [](TensorRef& t, const void* data, int64_t seqlen, int64_t heads, int64_t dim) {
    t.data = data;
    t.stride_head = dim;
    t.stride_seq = sat_mul(heads, dim);
    t.stride_batch = sat_mul(seqlen, t.stride_seq);
  };
  fill(p.q, q, seqlen_q, heads_q, head_dim);
  fill(p.k, k, seqlen_k, heads_kv, head_dim);
  fill(p.v, v, seqlen_k, heads_kv, head_dim_v);
  fill(p.o, o, seqlen_q, heads_q, head_dim_v);
  return p;
}

void check_problem(const AttentionProblem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    fail(fmt::format("dtype ({}) is not a dtype; allowed: f16, bf16", static_cast<int>(p.dtype)));
  }
  if (p.mask != MaskKind::none && p.mask != MaskKind::causal_top_left &&
      p.mask != MaskKind::causal_bottom_right && p.mask != MaskKind::window_top_left &&
      p.mask != MaskKind::window_bottom_right) {
    fail(fmt::format("mask ({}) is not a mask kind; allowed: none, causaltl, causalbr, windowtl, windowbr",
                     static_cast<int>(p.mask)));
  }
  if (p.batch < 0) fail(fmt::format("batch ({}) must be >= 0", p.batch));
  if (p.seqlen_q < 0) fail(fmt::format("seqlen_q ({}) must be >= 0", p.seqlen_q));
  if (p.seqlen_k < 0) fail(fmt::format("seqlen_k ({}) must be >= 0", p.seqlen_k));
  // heads_q == 0 is an empty problem (flashgen.hpp: launches nothing), like
  // batch == 0 or seqlen_q == 0; otherwise there must be KV heads to share.
  if (p.heads_q < 0) fail(fmt::format("heads_q ({}) must be >= 0", p.heads_q));
  if (p.heads_kv < 0) fail(fmt::format("heads_kv ({}) must be >= 0", p.heads_kv));
  if (p.heads_q > 0 && p.heads_kv == 0) {
    fail(fmt::format("heads_kv (0) must be >= 1 when heads_q ({}) > 0", p.heads_q));
  }
  check_head_dim("head_dim", p.head_dim);
  check_head_dim("head_dim_v", p.head_dim_v);
  if (p.heads_kv > 0 && p.heads_q % p.heads_kv != 0) {
    fail(fmt::format("heads_q ({}) must be a multiple of heads_kv ({})", p.heads_q, p.heads_kv));
  }
  if (!(p.softcap == 0.f || (p.softcap >= std::numeric_limits<float>::min() && p.softcap <= kMaxSoftcap))) {
    fail(fmt::format("softcap ({}) must be 0 (no softcapping) or a cap in [{}, {}] (the smallest normal float; "
                     "the kernels' tanh has an absolute error of about cap * 2^-21)",
                     p.softcap, std::numeric_limits<float>::min(), kMaxSoftcap));
  }
  if (p.softmax_scale && !std::isfinite(*p.softmax_scale)) {
    fail(fmt::format("softmax_scale ({}) must be finite", *p.softmax_scale));
  }
  // Window sizes: read only with a window mask.
  const bool window = p.mask == MaskKind::window_top_left || p.mask == MaskKind::window_bottom_right;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"window_left", p.window_left},
                                    std::pair<const char*, int64_t>{"window_right", p.window_right}}) {
    if (window && value < -1) {
      fail(fmt::format("{} ({}) must be >= -1 (a window size in keys; -1: unbounded on that side)", name, value));
    }
    if (!window && value != -1) {
      fail(fmt::format("{} ({}) must be -1 with mask {}: window sizes are read only with a sliding-window mask; "
                       "use mask windowtl or windowbr (MaskKind::window_top_left / window_bottom_right)",
                       name, value, to_string(p.mask)));
    }
  }
  if (window && (p.seqlen_q > kMaxWindowSeqlenSum || p.seqlen_k > kMaxWindowSeqlenSum - p.seqlen_q)) {
    fail(fmt::format("seqlen_q ({}) + seqlen_k ({}) must be at most 2^31 - 257 = {} with a window mask (mask {}): "
                     "the kernels add a query position to a key offset in 32 bits; split the call",
                     p.seqlen_q, p.seqlen_k, kMaxWindowSeqlenSum, to_string(p.mask)));
  }

  // Packed batches: the offsets' pointers and the packed extents.
  const bool varlen = p.varlen(), paged = p.paged();
  if (!varlen) {
    if (p.cu_seqlens_k != nullptr || p.total_q != 0 || p.total_k != 0) {
      fail(fmt::format("cu_seqlens_k ({}), total_q ({}) and total_k ({}) describe a packed batch and "
                       "must be unset (null, 0) without cu_seqlens_q; set cu_seqlens_q for a packed batch",
                       ptr_text(p.cu_seqlens_k), p.total_q, p.total_k));
    }
    if (!paged && p.seqused_k != nullptr) {
      fail(fmt::format("seqused_k ({}) is set without cu_seqlens_q or page_table; it counts the used keys of a packed "
                       "batch or a paged KV cache",
                       ptr_text(p.seqused_k)));
    }
  } else {
    if (p.cu_seqlens_k == nullptr && !paged) {
      fail("cu_seqlens_k is null but cu_seqlens_q is set; a packed batch needs both (int32 [batch + 1] each), or a "
           "page_table for its keys");
    }
    if (p.cu_seqlens_k != nullptr && paged) {
      fail(fmt::format("cu_seqlens_k ({}) must be null with a page_table: a paged KV cache finds each sequence's keys "
                       "through its pages (seqused_k counts them)",
                       ptr_text(p.cu_seqlens_k)));
    }
    if (paged && p.total_k != 0) {
      fail(fmt::format("total_k ({}) must be 0 with a page_table (the K/V extent is num_pages * page_size)", p.total_k));
    }
    for (const auto& [name, value] : {std::pair<const char*, int64_t>{"total_q", p.total_q},
                                      std::pair<const char*, int64_t>{"total_k", p.total_k}}) {
      if (value < 0 || value > kMaxPackedRows) {
        fail(fmt::format("{} ({}) must be in [0, 2^31 - 257] (the packed rows, counted by int32 offsets, with a "
                         "tile's headroom)",
                         name, value));
      }
    }
    for (const auto& [name, ptr] : {std::pair<const char*, const int32_t*>{"cu_seqlens_q", p.cu_seqlens_q},
                                    std::pair<const char*, const int32_t*>{"cu_seqlens_k", p.cu_seqlens_k},
                                    std::pair<const char*, const int32_t*>{"seqused_k", p.seqused_k}}) {
      if (reinterpret_cast<uintptr_t>(ptr) % alignof(int32_t) != 0) {
        fail(fmt::format("{} ({}) must be {}-byte aligned (int32)", name, ptr_text(ptr), alignof(int32_t)));
      }
    }
    for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"q", &p.q},
                                  std::pair<const char*, const TensorRef*>{"k", &p.k},
                                  std::pair<const char*, const TensorRef*>{"v", &p.v},
                                  std::pair<const char*, const TensorRef*>{"o", &p.o}}) {
      if (paged && (t == &p.k || t == &p.v)) continue;  // (pages: stride_batch steps between pages)
      if (t->stride_batch != 0) {
        fail(fmt::format("{}.stride_batch ({}) must be 0 with cu_seqlens_q: a packed batch is [total, heads, d], its "
                         "sequences found through cu_seqlens",
                         name, t->stride_batch));
      }
    }
    if (p.lse.data != nullptr && p.lse.stride_batch != 0) {
      fail(fmt::format("lse.stride_batch ({}) must be 0 with cu_seqlens_q: a packed batch's LSE is [heads_q, total_q]",
                       p.lse.stride_batch));
    }
  }

  if (p.seqused_k != nullptr && reinterpret_cast<uintptr_t>(p.seqused_k) % alignof(int32_t) != 0) {
    fail(fmt::format("seqused_k ({}) must be {}-byte aligned (int32)", ptr_text(p.seqused_k), alignof(int32_t)));
  }
  // A paged KV cache: the table and the pages' extents.
  if (!paged) {
    if (p.page_table_stride != 0 || p.page_size != 0 || p.num_pages != 0) {
      fail(fmt::format("page_table_stride ({}), page_size ({}) and num_pages ({}) describe a paged KV cache and must be 0 "
                       "without page_table; set page_table for a paged cache",
                       p.page_table_stride, p.page_size, p.num_pages));
    }
  } else {
    if (p.page_size < 1 || p.page_size > kMaxPageSize || (p.page_size & (p.page_size - 1)) != 0) {
      fail(fmt::format("page_size ({}) must be a power of two in [1, {}] (keys per page)", p.page_size, kMaxPageSize));
    }
    if (p.num_pages < 0 || p.num_pages > kMaxPackedRows) {
      fail(fmt::format("num_pages ({}) must be in [0, 2^31 - 257] (pages are int32 indices)", p.num_pages));
    }
    const int64_t max_pages = (p.seqlen_k + p.page_size - 1) / p.page_size;
    if (p.page_table_stride < max_pages) {
      fail(fmt::format("page_table_stride ({}) must be at least ceil(seqlen_k / page_size) = ceil({} / {}) = {} (a "
                       "sequence's row of page_table holds a page per page_size keys)",
                       p.page_table_stride, p.seqlen_k, p.page_size, max_pages));
    }
    if (reinterpret_cast<uintptr_t>(p.page_table) % alignof(int32_t) != 0) {
      fail(fmt::format("page_table ({}) must be {}-byte aligned (int32)", ptr_text(p.page_table), alignof(int32_t)));
    }
    if (p.batch > 0 && p.page_table_stride > 0 && p.batch > INT64_MAX / p.page_table_stride) {
      fail(fmt::format("page_table: batch * page_table_stride = {} * {} elements overflows int64", p.batch,
                       p.page_table_stride));
    }
  }

  // Nothing is read or written when there is no query row (batch, seqlen_q or
  // heads_q == 0, or a packed batch without rows: pointers may be null); K, V and the bias are not read when
  // there is no key (rows then get O = 0, LSE = -inf), so those may be null too.
  const bool has_rows = p.batch > 0 && p.seqlen_q > 0 && p.heads_q > 0 && (!varlen || p.total_q > 0);
  const bool has_keys = has_rows && p.seqlen_k > 0 && (paged ? p.num_pages > 0 : !varlen || p.total_k > 0);
  if (paged && has_rows && p.seqlen_k > 0 && p.num_pages == 0) {
    fail(fmt::format("num_pages (0) must be >= 1 with a page_table and seqlen_k ({}) > 0", p.seqlen_k));
  }
  // A packed batch's tensors have one "batch" of total rows.
  const int64_t t_batch = varlen ? 1 : p.batch;
  const int64_t rows_q = varlen ? p.total_q : p.seqlen_q, rows_k = varlen ? p.total_k : p.seqlen_k;
  const char* rows_q_name = varlen ? "total_q" : "seqlen_q";
  const char* rows_k_name = varlen ? "total_k" : "seqlen_k";
  check_tensor("q", p.q, has_rows, false, t_batch, rows_q, rows_q_name, p.heads_q, "heads_q", p.head_dim, "head_dim");
  // (paged: K/V are [num_pages, page_size, heads_kv, d], stride_batch between pages)
  const int64_t kv_batch = paged ? p.num_pages : t_batch, kv_rows = paged ? p.page_size : rows_k;
  const char* kv_rows_name = paged ? "page_size" : rows_k_name;
  check_tensor("k", p.k, has_keys, false, kv_batch, kv_rows, kv_rows_name, p.heads_kv, "heads_kv", p.head_dim,
               "head_dim");
  check_tensor("v", p.v, has_keys, false, kv_batch, kv_rows, kv_rows_name, p.heads_kv, "heads_kv", p.head_dim_v,
               "head_dim_v");
  const int64_t o_bytes = check_tensor("o", p.o, has_rows, true, t_batch, rows_q, rows_q_name, p.heads_q, "heads_q", p.head_dim_v,
               "head_dim_v");

  // Bias [batch, heads_q, seqlen_q, seqlen_k].
  const BiasRef& b = p.bias;
  switch (b.kind) {
    case BiasKind::none:
      if (b.data != nullptr) {
        fail(fmt::format("bias.data ({}) must be null when bias.kind is none; set bias.kind to "
                         "input or f32 to add a bias",
                         ptr_text(b.data)));
      }
      break;
    case BiasKind::input:
    case BiasKind::f32: {
      const char* kind = to_string(b.kind).data();
      const int64_t elem = b.kind == BiasKind::f32 ? 4 : 2;
      const struct {
        const char* field;
        int64_t value;
      } strides[] = {{"stride_batch", b.stride_batch},
                     {"stride_head", b.stride_head},
                     {"stride_q", b.stride_q},
                     {"stride_k", b.stride_k}};
      for (const auto& s : strides) {
        if (s.value < 0) {
          fail(fmt::format("bias.{} ({}) must be >= 0; negative strides are not supported", s.field,
                           s.value));
        }
      }
      if (!has_keys) break;  // never read
      if (b.data == nullptr) {
        fail(fmt::format("bias.data is null but bias.kind is {}; pass the bias tensor or set "
                         "bias.kind to none",
                         kind));
      }
      if (reinterpret_cast<uintptr_t>(b.data) % static_cast<uintptr_t>(elem) != 0) {
        fail(fmt::format("bias.data ({}) must be {}-byte aligned for bias.kind {}", ptr_text(b.data),
                         elem, kind));
      }
      int64_t bytes;
      if (!max_byte_offset({{p.batch, b.stride_batch},
                            {p.heads_q, b.stride_head},
                            {p.seqlen_q, b.stride_q},
                            {p.seqlen_k, b.stride_k}},
                           elem, &bytes)) {
        fail(fmt::format("bias: the largest offset (batch-1)*stride_batch + (heads_q-1)*stride_head "
                         "+ (seqlen_q-1)*stride_q + (seqlen_k-1)*stride_k = ({}-1)*{} + ({}-1)*{} + "
                         "({}-1)*{} + ({}-1)*{} elements overflows a signed 64-bit byte offset",
                         p.batch, b.stride_batch, p.heads_q, b.stride_head, p.seqlen_q, b.stride_q,
                         p.seqlen_k, b.stride_k));
      }
      break;
    }
    default:
      fail(fmt::format("bias.kind ({}) is not a bias kind; allowed: none, input, f32",
                       static_cast<int>(b.kind)));
  }

  // Sinks [heads_q] float32; ignored entirely when null.
  if (p.sinks != nullptr && has_rows &&
      reinterpret_cast<uintptr_t>(p.sinks) % alignof(float) != 0) {
    fail(fmt::format("sinks ({}) must be {}-byte aligned (float32 [heads_q])",
                     ptr_text(static_cast<const void*>(p.sinks)), alignof(float)));
  }

  // ALiBi slopes: element (b, h) at alibi_slopes[b * alibi_stride_batch + h], float32; ignored when null.
  if (p.alibi_slopes != nullptr) {
    if (p.alibi_stride_batch < 0) {
      fail(fmt::format("alibi_stride_batch ({}) must be >= 0 (0: one slope per query head for every batch; "
                       "heads_q: [batch, heads_q] slopes)",
                       p.alibi_stride_batch));
    }
    if (has_rows) {
      if (reinterpret_cast<uintptr_t>(p.alibi_slopes) % alignof(float) != 0) {
        fail(fmt::format("alibi_slopes ({}) must be {}-byte aligned (float32)",
                         ptr_text(static_cast<const void*>(p.alibi_slopes)), alignof(float)));
      }
      int64_t bytes;
      if (!max_byte_offset({{p.batch, p.alibi_stride_batch}, {p.heads_q, 1}}, 4, &bytes)) {
        fail(fmt::format("alibi_slopes: the largest offset (batch-1)*alibi_stride_batch + heads_q-1 = ({}-1)*{} + "
                         "{}-1 elements overflows a signed 64-bit byte offset",
                         p.batch, p.alibi_stride_batch, p.heads_q));
      }
    }
  }

  // LSE [batch, heads_q, seqlen_q] float32 (packed: [heads_q, total_q]); ignored entirely when data is null.
  const LseRef& l = p.lse;
  if (l.data != nullptr) {
    const struct {
      const char* field;
      int64_t value;
      int64_t extent;
      const char* extent_name;
    } strides[] = {{"stride_batch", l.stride_batch, t_batch, "batch"},
                   {"stride_head", l.stride_head, p.heads_q, "heads_q"}};
    for (const auto& s : strides) {
      if (s.value < 0) {
        fail(fmt::format("lse.{} ({}) must be >= 0; negative strides are not supported", s.field,
                         s.value));
      }
    }
    if (has_rows) {
      if (reinterpret_cast<uintptr_t>(l.data) % alignof(float) != 0) {
        fail(fmt::format("lse.data ({}) must be {}-byte aligned (float32)",
                         ptr_text(static_cast<const void*>(l.data)), alignof(float)));
      }
      for (const auto& s : strides) {
        if (s.value == 0 && s.extent > 1) {
          fail(fmt::format("lse.{} (0) must be positive when {} ({}) > 1: an output cannot broadcast",
                           s.field, s.extent_name, s.extent));
        }
      }
      int64_t bytes;
      if (!max_byte_offset({{t_batch, l.stride_batch}, {p.heads_q, l.stride_head}, {rows_q, 1}},
                           4, &bytes)) {
        fail(fmt::format("lse: the largest offset (batch-1)*stride_batch + (heads_q-1)*stride_head + "
                         "{}-1 = ({}-1)*{} + ({}-1)*{} + {}-1 elements overflows a signed "
                         "64-bit byte offset",
                         rows_q_name, t_batch, l.stride_batch, p.heads_q, l.stride_head, rows_q));
      }
      check_no_self_overlap("lse",
                            {{"stride_batch", l.stride_batch, t_batch, "batch"},
                             {"stride_head", l.stride_head, p.heads_q, "heads_q"}},
                            rows_q, rows_q_name);
      // O and LSE are both written: a shared byte would lose one of them. (O is not compared
      // with the inputs: docs/design.md, 3f.)
      const auto o_begin = reinterpret_cast<uintptr_t>(p.o.data), l_begin = reinterpret_cast<uintptr_t>(l.data);
      check_disjoint(ByteRange{"lse", l_begin, l_begin + static_cast<uintptr_t>(bytes)},
                     ByteRange{"o", o_begin, o_begin + static_cast<uintptr_t>(o_bytes)},
                     "the forward's two outputs must not overlap");
    }
  }
}

// ---- MergeProblem ------------------------------------------------------------

namespace {

void check_state_dtype(const char* name, StateDType d) {
  if (d != StateDType::f32 && d != StateDType::f16 && d != StateDType::bf16) {
    fail(fmt::format("{} ({}) is not a state dtype; allowed: f32, f16, bf16", name, static_cast<int>(d)));
  }
}

}  // namespace

MergeProblem make_merge_problem(StateDType partial_dtype, StateDType out_dtype, int64_t num_states,
                                int64_t batch, int64_t seqlen_q, int64_t heads, int64_t head_dim_v,
                                const void* o_partial, const float* lse_partial, void* o, float* lse) {
  MergeProblem p;
  p.partial_dtype = partial_dtype;
  p.out_dtype = out_dtype;
  p.num_states = num_states;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.heads = heads;
  p.head_dim_v = head_dim_v;
  p.o_partial.data = o_partial;
  p.o_partial.stride_head = head_dim_v;
  p.o_partial.stride_seq = sat_mul(heads, head_dim_v);
  p.o_partial.stride_batch = sat_mul(seqlen_q, p.o_partial.stride_seq);
  p.o_partial.stride_state = sat_mul(batch, p.o_partial.stride_batch);
  p.lse_partial.data = lse_partial;
  p.lse_partial.stride_seq = 1;
  p.lse_partial.stride_head = seqlen_q;
  p.lse_partial.stride_batch = sat_mul(heads, seqlen_q);
  p.lse_partial.stride_state = sat_mul(batch, p.lse_partial.stride_batch);
  p.o.data = o;
  p.o.stride_head = head_dim_v;
  p.o.stride_seq = p.o_partial.stride_seq;
  p.o.stride_batch = p.o_partial.stride_batch;
  p.lse.data = lse;
  p.lse.stride_head = seqlen_q;
  p.lse.stride_batch = p.lse_partial.stride_batch;
  return p;
}

void check_merge_problem(const MergeProblem& p) {
  check_state_dtype("partial_dtype", p.partial_dtype);
  check_state_dtype("out_dtype", p.out_dtype);
  if (p.num_states < 1 || p.num_states > kMaxMergeStates) {
    fail(fmt::format("num_states ({}) must be in [1, {}]", p.num_states, kMaxMergeStates));
  }
  if (p.batch < 0) fail(fmt::format("batch ({}) must be >= 0", p.batch));
  if (p.seqlen_q < 0) fail(fmt::format("seqlen_q ({}) must be >= 0", p.seqlen_q));
  if (p.heads < 0) fail(fmt::format("heads ({}) must be >= 0", p.heads));
  if (p.head_dim_v < kMergeHeadDimMultiple || p.head_dim_v > kMaxMergeHeadDim ||
      p.head_dim_v % kMergeHeadDimMultiple != 0) {
    fail(fmt::format("head_dim_v ({}) must be a multiple of {} in [{}, {}]", p.head_dim_v, kMergeHeadDimMultiple,
                     kMergeHeadDimMultiple, kMaxMergeHeadDim));
  }
  const bool has_rows = p.batch > 0 && p.seqlen_q > 0 && p.heads > 0;
  const int64_t part_bytes = dtype_bytes(p.partial_dtype);
  const int64_t out_bytes = dtype_bytes(p.out_dtype);

  // Strides: >= 0; O tensors' strides multiples of 16 bytes (the kernel's
  // 16-byte vectors).
  struct Stride {
    const char* field;
    int64_t value;
    int64_t extent;
    const char* extent_name;
  };
  auto check_strides = [](const char* name, std::initializer_list<Stride> strides, int64_t elem_bytes,
                          bool vector, bool output, bool needed) {
    for (const Stride& s : strides) {
      if (s.value < 0) {
        fail(fmt::format("{}.{} ({}) must be >= 0; negative strides are not supported", name, s.field, s.value));
      }
      if (vector && s.value % (16 / elem_bytes) != 0) {
        fail(fmt::format("{}.{} ({}) must be a multiple of {} elements (16 bytes of {}-byte elements) or 0", name,
                         s.field, s.value, 16 / elem_bytes, elem_bytes));
      }
    }
    if (!output || !needed) return;
    for (const Stride& s : strides) {
      if (s.value == 0 && s.extent > 1) {
        fail(fmt::format("{}.{} (0) must be positive when {} ({}) > 1: an output cannot broadcast", name, s.field,
                         s.extent_name, s.extent));
      }
    }
  };
  auto check_pointer = [](const char* name, const void* data, int64_t align) {
    if (data == nullptr) {
      fail(fmt::format("{}.data is null; a non-empty merge (batch, seqlen_q and heads > 0) needs a device pointer",
                       name));
    }
    if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(align) != 0) {
      fail(fmt::format("{}.data ({}) must be {}-byte aligned", name, ptr_text(data), align));
    }
  };
  auto span = [](const char* name, std::initializer_list<Dim> dims, int64_t elem_bytes, const void* data,
                 const char* formula) {
    int64_t bytes = 0;
    if (!max_byte_offset(dims, elem_bytes, &bytes)) {
      std::string values;
      for (const Dim& d : dims) values += fmt::format("{}({}-1)*{}", values.empty() ? "" : " + ", d.extent, d.stride);
      fail(fmt::format("{}: the largest offset {} = {} elements overflows a signed 64-bit byte offset", name, formula,
                       values));
    }
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
    return ByteRange{name, begin, begin + static_cast<uintptr_t>(bytes)};
  };

  const StatesRef& op = p.o_partial;
  const StatesLseRef& lp = p.lse_partial;
  check_strides("o_partial",
                {{"stride_state", op.stride_state, p.num_states, "num_states"},
                 {"stride_batch", op.stride_batch, p.batch, "batch"},
                 {"stride_seq", op.stride_seq, p.seqlen_q, "seqlen_q"},
                 {"stride_head", op.stride_head, p.heads, "heads"}},
                part_bytes, true, false, has_rows);
  check_strides("lse_partial",
                {{"stride_state", lp.stride_state, p.num_states, "num_states"},
                 {"stride_batch", lp.stride_batch, p.batch, "batch"},
                 {"stride_head", lp.stride_head, p.heads, "heads"},
                 {"stride_seq", lp.stride_seq, p.seqlen_q, "seqlen_q"}},
                4, false, false, has_rows);
  check_strides("o",
                {{"stride_batch", p.o.stride_batch, p.batch, "batch"},
                 {"stride_seq", p.o.stride_seq, p.seqlen_q, "seqlen_q"},
                 {"stride_head", p.o.stride_head, p.heads, "heads"}},
                out_bytes, true, true, has_rows);
  const bool has_lse = p.lse.data != nullptr;
  if (has_lse) {
    check_strides("lse",
                  {{"stride_batch", p.lse.stride_batch, p.batch, "batch"},
                   {"stride_head", p.lse.stride_head, p.heads, "heads"}},
                  4, false, true, has_rows);
  }
  if (!has_rows) return;  // nothing is read or written

  check_pointer("o_partial", op.data, 16);
  check_pointer("lse_partial", lp.data, 4);
  check_pointer("o", p.o.data, 16);
  if (has_lse) check_pointer("lse", p.lse.data, 4);

  const ByteRange r_op =
      span("o_partial",
           {{p.num_states, op.stride_state}, {p.batch, op.stride_batch}, {p.seqlen_q, op.stride_seq},
            {p.heads, op.stride_head}, {p.head_dim_v, 1}},
           part_bytes, op.data,
           "(num_states-1)*stride_state + (batch-1)*stride_batch + (seqlen_q-1)*stride_seq + (heads-1)*stride_head + "
           "head_dim_v-1");
  const ByteRange r_lp = span("lse_partial",
                              {{p.num_states, lp.stride_state}, {p.batch, lp.stride_batch}, {p.heads, lp.stride_head},
                               {p.seqlen_q, lp.stride_seq}},
                              4, lp.data,
                              "(num_states-1)*stride_state + (batch-1)*stride_batch + (heads-1)*stride_head + "
                              "(seqlen_q-1)*stride_seq");
  const ByteRange r_o = span("o",
                             {{p.batch, p.o.stride_batch}, {p.seqlen_q, p.o.stride_seq}, {p.heads, p.o.stride_head},
                              {p.head_dim_v, 1}},
                             out_bytes, p.o.data,
                             "(batch-1)*stride_batch + (seqlen_q-1)*stride_seq + (heads-1)*stride_head + head_dim_v-1");
  check_no_self_overlap("o",
                        {{"stride_batch", p.o.stride_batch, p.batch, "batch"},
                         {"stride_seq", p.o.stride_seq, p.seqlen_q, "seqlen_q"},
                         {"stride_head", p.o.stride_head, p.heads, "heads"}},
                        p.head_dim_v, "head_dim_v");
  check_disjoint(r_o, r_op);
  check_disjoint(r_o, r_lp);
  if (has_lse) {
    const ByteRange r_l = span("lse", {{p.batch, p.lse.stride_batch}, {p.heads, p.lse.stride_head}, {p.seqlen_q, 1}},
                               4, p.lse.data, "(batch-1)*stride_batch + (heads-1)*stride_head + seqlen_q-1");
    check_no_self_overlap("lse",
                          {{"stride_batch", p.lse.stride_batch, p.batch, "batch"},
                           {"stride_head", p.lse.stride_head, p.heads, "heads"}},
                          p.seqlen_q, "seqlen_q");
    check_disjoint(r_l, r_op);
    check_disjoint(r_l, r_lp);
    check_disjoint(r_l, r_o);
  }
}

}  // namespace flashgen
