// GPU test tier helpers: one attention "case" -> fresh random inputs, device
// buffers (through the lazily loaded driver table), poisoned outputs,
// flashgen::forward, and a full check against the float64 reference.
//
// Nothing here needs doctest; test_forward.cpp turns CaseResults into checks.
//
// Poison: O (and the guard bands / padding around it) is filled with 0xFFFF
// (a NaN in f16 and in bf16), LSE with 0xFFFFFFFF (a float NaN). After the
// launch every element of the O / LSE views must differ from the poison and be
// a number, and every element outside the views must still hold the poison.
// Inputs are laid into NaN-filled buffers, so padding a kernel wrongly reads
// shows up as NaN in the output.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "flashgen/flashgen.hpp"
#include "runtime/driver.hpp"
#include "test/reference.hpp"
#include "test/gpu/units.hpp"

namespace fgtest {

using flashgen::AttentionProblem;
using flashgen::BiasKind;
using flashgen::DType;
using flashgen::MaskKind;
namespace ref = flashgen::ref;
namespace rt = flashgen::rt;

// ---------------------------------------------------------------------------
// GPU presence: decided once, when the test cases register.
// ---------------------------------------------------------------------------

/// Why there is no usable GPU (the driver's Unavailable message).
inline std::string no_gpu_reason() {
  try {
    (void)rt::driver();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "the CUDA driver loaded but reports no device";
}

/// True when a GPU is usable; prints one line the first time it is false.
inline bool gpu_present() {
  static const bool present = [] {
    const bool ok = flashgen::gpu_available();
    if (!ok) {
      std::printf("[flashgen gpu tier] no GPU found (%s); every GPU test case is reported as skipped\n",
                  no_gpu_reason().c_str());
      std::fflush(stdout);
    }
    return ok;
  }();
  return present;
}

/// FLASHGEN_TEST_QUICK=1 (set by test/run_sanitizers_device.sh): run only a
/// representative subset of small cases, for compute-sanitizer, which slows
/// kernels 10-100x. Read once, when the test cases register.
inline bool quick_mode() {
  static const bool quick = [] {
    const char* q = std::getenv("FLASHGEN_TEST_QUICK");
    return q != nullptr && *q != '\0' && std::string(q) != "0";
  }();
  return quick;
}

// ---------------------------------------------------------------------------
// RAII wrappers over the driver table
// ---------------------------------------------------------------------------

inline const rt::Driver& drv() { return rt::driver(); }

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) rt::check(drv().cuMemAlloc(&ptr_, bytes_), "cuMemAlloc");
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, 0);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  void reset() noexcept {
    if (ptr_ != 0) (void)drv().cuMemFree(ptr_);  // errors here (e.g. after a sticky fault) are not actionable
    ptr_ = 0;
    bytes_ = 0;
  }

  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  /// Address as an integer for pointer arithmetic in make_problem (0 when empty).
  uintptr_t address() const { return static_cast<uintptr_t>(ptr_); }

  template <class T>
  void upload(const std::vector<T>& host) {
    if (host.size() * sizeof(T) != bytes_) throw std::logic_error("DeviceBuffer::upload: size mismatch");
    if (bytes_ > 0) rt::check(drv().cuMemcpyHtoD(ptr_, host.data(), bytes_), "cuMemcpyHtoD");
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (bytes_ > 0) rt::check(drv().cuMemcpyDtoH(host.data(), ptr_, host.size() * sizeof(T)), "cuMemcpyDtoH");
    return host;
  }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

class Stream {
 public:
  Stream() { rt::check(drv().cuStreamCreate(&s_, CU_STREAM_DEFAULT), "cuStreamCreate"); }
  ~Stream() {
    if (s_ != nullptr) (void)drv().cuStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return s_; }
  void sync() const { rt::check(drv().cuStreamSynchronize(s_), "cuStreamSynchronize"); }

 private:
  CUstream s_ = nullptr;
};

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------

/// How Q, K, V, O (and LSE) are laid out in memory.
enum class Layout {
  bshd,               ///< contiguous [B, S, H, d] tensors, LSE [B, H, Sq] contiguous
  padded,             ///< every tensor padded (head, seq and batch strides larger than needed,
                      ///< input padding NaN, a NaN tail after each input), LSE with odd strides
  packed_qkv,         ///< Q, K, V = head slices of one [B, S, 3, H, d] buffer
  kv_head_broadcast,  ///< K, V stored once per (b, s): stride_head 0 for every KV head
  kv_batch_broadcast, ///< K, V [S, H, d] shared by every batch entry: stride_batch 0
  kv_row_broadcast,   ///< one K row and one V row per (b, h) for every key: stride_seq 0
};

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::bshd: return "bshd";
    case Layout::padded: return "padded";
    case Layout::packed_qkv: return "packed-qkv";
    case Layout::kv_head_broadcast: return "kv-head-bcast";
    case Layout::kv_batch_broadcast: return "kv-batch-bcast";
    case Layout::kv_row_broadcast: return "kv-row-bcast";
  }
  return "?";
}

/// How the logits of a case are built (the magnitude family of the numerics tests).
enum class Logits {
  plain,       ///< Q, K, V uniform in [-1, 1]; bias (if any) uniform in [-2, 2]
  qk,          ///< Q and K scaled so that |S| is around `magnitude`
  bias_shift,  ///< bias = magnitude + uniform [-2, 2] (-inf entries stay)
  all_equal,   ///< bias = magnitude on every key, Q = 0: every visible logit equal
  one_huge,    ///< bias = magnitude on one key per row, uniform [-2, 2] elsewhere
  lowest_rows, ///< some bias rows at the fp32 lowest value on every key, the others plain
};
inline const char* logits_name(Logits l) {
  switch (l) {
    case Logits::plain: return "plain";
    case Logits::qk: return "qk";
    case Logits::bias_shift: return "bias-shift";
    case Logits::all_equal: return "all-equal";
    case Logits::one_huge: return "one-huge";
    case Logits::lowest_rows: return "lowest-rows";
  }
  return "?";
}

/// Where a case writes one non-finite input value.
enum class Poison { none, q, k, v, v_many, bias };
inline const char* poison_name(Poison p) {
  switch (p) {
    case Poison::none: return "none";
    case Poison::q: return "q";
    case Poison::k: return "k";
    case Poison::v: return "v";
    case Poison::v_many: return "v-many";
    case Poison::bias: return "bias";
  }
  return "?";
}

struct Case {
  std::string group;
  DType dtype = DType::f16;
  int64_t head_dim = 64, head_dim_v = 64;
  int64_t batch = 1, heads_q = 2, heads_kv = 2, seqlen_q = 65, seqlen_k = 129;
  MaskKind mask = MaskKind::none;
  BiasKind bias = BiasKind::none;
  bool bias_neg_inf = false;       ///< -inf at ~10 % of the bias entries
  bool bias_neg_inf_rows = false;  ///< some whole bias rows -inf, some rows with a -inf prefix
  bool bias_broadcast = false;     ///< bias stride_batch = stride_head = 0
  /// Logit magnitude family (issue 11): how the logits reach `magnitude`.
  Logits logits = Logits::plain;
  double magnitude = 0.0;
  /// A NaN or +inf written into one input (`poison_value`; 0 = none).
  Poison poison = Poison::none;
  float poison_value = 0.0f;
  bool lse = true;
  float softcap = 0.0f;            ///< AttentionProblem::softcap (0: off)
  int64_t window_left = -1, window_right = -1;  ///< with a window mask (AttentionProblem::window_left/right)
  bool sinks = false;              ///< one random sink logit per query head (AttentionProblem::sinks)
  bool alibi = false;              ///< ALiBi slopes per query head (AttentionProblem::alibi_slopes)
  bool alibi_per_batch = false;    ///< with alibi: a slope per (batch, head), alibi_stride_batch = heads_q
  Layout layout = Layout::bshd;
  int64_t sample_rows = -1;        ///< -1: 256 rows when a seqlen >= 4096, else all; 0: all; n: n rows
  /// Split-KV decode (decode.hpp) instead of forward(): -1 no; 0 num_splits
  /// chosen by plan_decode; n >= 1 that many splits.
  int decode_splits = -1;
  /// With decode: the caller's workspace (poisoned with NaN before the call)
  /// instead of the library's.
  bool decode_caller_workspace = false;

  int64_t total_rows() const { return batch * seqlen_q * heads_q; }
  int64_t rows_to_check() const {
    const int64_t total = total_rows();
    if (sample_rows == 0) return total;
    if (sample_rows > 0) return std::min(sample_rows, total);
    return std::max(seqlen_q, seqlen_k) >= 4096 ? std::min<int64_t>(256, total) : total;
  }

  std::string str() const {
    std::string bias_text = std::string(flashgen::to_string(bias));
    if (bias != BiasKind::none) {
      if (bias_neg_inf) bias_text += ",-inf";
      if (bias_neg_inf_rows) bias_text += ",-inf-rows";
      if (bias_broadcast) bias_text += ",bcast";
    }
    std::string extra;
    if (logits != Logits::plain) extra += fmt::format(" logits={}:{:.3g}", logits_name(logits), magnitude);
    if (poison != Poison::none) extra += fmt::format(" poison={}:{}", poison_name(poison), poison_value);
    if (softcap > 0.0f) extra += fmt::format(" softcap={}", softcap);
    if (mask == MaskKind::window_top_left || mask == MaskKind::window_bottom_right)
      extra += fmt::format(" window=({},{})", window_left, window_right);
    if (sinks) extra += " sinks";
    if (alibi) extra += alibi_per_batch ? " alibi=b,h" : " alibi";
    if (decode_splits >= 0)
      extra += fmt::format(" decode={}{}", decode_splits == 0 ? std::string("auto") : std::to_string(decode_splits),
                           decode_caller_workspace ? ",ws" : "");
    return fmt::format("[{}] {} d{}/v{} b{} hq{} hkv{} sq{} sk{} {} bias={} lse={} {}{}", group,
                       flashgen::to_string(dtype), head_dim, head_dim_v, batch, heads_q, heads_kv,
                       seqlen_q, seqlen_k, flashgen::to_string(mask), bias_text, lse ? 1 : 0,
                       layout_name(layout), extra);
  }
};

/// Tolerances (outputs here have magnitude <= 1; see DESIGN.md for the rounding steps).
inline double o_atol(DType d) { return d == DType::f16 ? 3e-3 : 2e-2; }
inline double lse_rtol(DType d) { return d == DType::f16 ? 1e-3 : 2e-3; }

constexpr uint16_t kPoison16 = 0xFFFFu;       // NaN in f16 and bf16
constexpr uint32_t kPoison32 = 0xFFFFFFFFu;   // NaN in f32
constexpr int64_t kOutGuard = 64;             // poisoned O elements before and after the view (128 B)
constexpr int64_t kLseGuard = 32;             // poisoned LSE elements before and after the view
constexpr int64_t kPad = 8;                   // padding unit of the padded layout (16 bytes)
constexpr int64_t kNanTailRows = 64;          // NaN seq rows after each padded input

inline bool is_nan16(DType d, uint16_t bits) {
  return d == DType::f16 ? ((bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0)
                         : ((bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0);
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// A [B, S, H, d] view into one buffer, in elements.
struct View {
  int64_t offset = 0, sb = 0, ss = 0, sh = 0;
  int64_t at(int64_t b, int64_t s, int64_t h) const { return offset + b * sb + s * ss + h * sh; }
};

/// Buffer sizes (elements) and views of one case.
struct Geometry {
  bool packed = false;                      // Q, K, V all live in the q buffer
  int64_t q_elems = 0, k_elems = 0, v_elems = 0;
  View q, k, v;
  int64_t o_elems = 0;                      // including the guard bands
  View o;
  int64_t lse_elems = 0;                    // including the guard bands; 0 without LSE
  View lse;                                 // offset, sb, sh ([b, h, i] at offset + b*sb + h*sh + i)
  int64_t bias_elems = 0;                   // 0 without bias (or without keys)
  int64_t bias_sb = 0, bias_sh = 0, bias_sq = 0, bias_sk = 1;
};

inline Geometry geometry(const Case& c) {
  const int64_t B = c.batch, Sq = c.seqlen_q, Sk = c.seqlen_k, Hq = c.heads_q, Hkv = c.heads_kv;
  const int64_t D = c.head_dim, Dv = c.head_dim_v;
  Geometry g;
  auto contiguous = [](int64_t S, int64_t H, int64_t d) {
    View v;
    v.sh = d;
    v.ss = H * d;
    v.sb = S * H * d;
    return v;
  };
  auto padded = [](int64_t S, int64_t H, int64_t d) {
    View v;
    v.sh = d + kPad;
    v.ss = H * v.sh + kPad;
    v.sb = S * v.ss + 2 * kPad;
    return v;
  };
  int64_t o_extent = B * Sq * Hq * Dv;
  switch (c.layout) {
    case Layout::bshd:
      g.q = contiguous(Sq, Hq, D);
      g.k = contiguous(Sk, Hkv, D);
      g.v = contiguous(Sk, Hkv, Dv);
      g.o = contiguous(Sq, Hq, Dv);
      g.q_elems = B * Sq * Hq * D;
      g.k_elems = B * Sk * Hkv * D;
      g.v_elems = B * Sk * Hkv * Dv;
      break;
    case Layout::padded:
      g.q = padded(Sq, Hq, D);
      g.k = padded(Sk, Hkv, D);
      g.v = padded(Sk, Hkv, Dv);
      g.o = padded(Sq, Hq, Dv);
      g.q_elems = B > 0 && Sq > 0 ? B * g.q.sb + kNanTailRows * g.q.ss : 0;
      g.k_elems = B > 0 && Sk > 0 ? B * g.k.sb + kNanTailRows * g.k.ss : 0;
      g.v_elems = B > 0 && Sk > 0 ? B * g.v.sb + kNanTailRows * g.v.ss : 0;
      o_extent = B * g.o.sb;
      break;
    case Layout::packed_qkv: {
      if (Sq != Sk || Hq != Hkv || D != Dv) throw std::logic_error("packed_qkv needs sq == sk, hq == hkv, d == dv");
      g.packed = true;
      View base;
      base.sh = D;
      base.ss = 3 * Hq * D;
      base.sb = Sq * base.ss;
      g.q = base;
      g.k = base;
      g.k.offset = Hq * D;
      g.v = base;
      g.v.offset = 2 * Hq * D;
      g.q_elems = B * Sq * 3 * Hq * D;
      g.o = contiguous(Sq, Hq, Dv);
      break;
    }
    case Layout::kv_head_broadcast:
      g.q = contiguous(Sq, Hq, D);
      g.k.sh = 0;
      g.k.ss = D;
      g.k.sb = Sk * D;
      g.v.sh = 0;
      g.v.ss = Dv;
      g.v.sb = Sk * Dv;
      g.o = contiguous(Sq, Hq, Dv);
      g.q_elems = B * Sq * Hq * D;
      g.k_elems = B * Sk * D;
      g.v_elems = B * Sk * Dv;
      break;
    case Layout::kv_batch_broadcast:
      g.q = contiguous(Sq, Hq, D);
      g.k = contiguous(Sk, Hkv, D);
      g.k.sb = 0;
      g.v = contiguous(Sk, Hkv, Dv);
      g.v.sb = 0;
      g.o = contiguous(Sq, Hq, Dv);
      g.q_elems = B * Sq * Hq * D;
      g.k_elems = Sk * Hkv * D;
      g.v_elems = Sk * Hkv * Dv;
      break;
    case Layout::kv_row_broadcast:
      g.q = contiguous(Sq, Hq, D);
      g.k.sh = D;
      g.k.ss = 0;
      g.k.sb = Hkv * D;
      g.v.sh = Dv;
      g.v.ss = 0;
      g.v.sb = Hkv * Dv;
      g.o = contiguous(Sq, Hq, Dv);
      g.q_elems = B * Sq * Hq * D;
      g.k_elems = B * Hkv * D;
      g.v_elems = B * Hkv * Dv;
      break;
  }
  g.o.offset = kOutGuard;
  g.o_elems = kOutGuard + o_extent + kOutGuard;

  if (c.lse) {
    g.lse.offset = kLseGuard;
    if (c.layout == Layout::padded) {
      g.lse.sh = Sq + 5;
      g.lse.sb = Hq * g.lse.sh + 3;
    } else {
      g.lse.sh = Sq;
      g.lse.sb = Hq * Sq;
    }
    g.lse_elems = kLseGuard + B * g.lse.sb + kLseGuard;
  }

  if (c.bias != BiasKind::none && B > 0 && Sq > 0 && Sk > 0) {
    g.bias_sk = 1;
    g.bias_sq = round_up(Sk, 8);  // padding keys (NaN) between rows
    if (c.bias_broadcast) {
      g.bias_sb = 0;
      g.bias_sh = 0;
      g.bias_elems = Sq * g.bias_sq;
    } else {
      g.bias_sh = Sq * g.bias_sq;
      g.bias_sb = Hq * g.bias_sh;
      g.bias_elems = B * g.bias_sb;
    }
  }
  return g;
}

/// The problem for base addresses of the buffers (0 = no buffer: null pointer).
/// `kb`, `vb` are ignored for the packed layout (K and V live in the Q buffer).
/// `sinksb`, `alibib`: the sinks and ALiBi slopes (fp32; 0 = none, as the case asks).
inline AttentionProblem make_problem(const Case& c, const Geometry& g, uintptr_t qb, uintptr_t kb, uintptr_t vb,
                                     uintptr_t ob, uintptr_t biasb, uintptr_t lseb, uintptr_t sinksb = 0,
                                     uintptr_t alibib = 0) {
  if (g.packed) kb = vb = qb;
  AttentionProblem p;
  p.dtype = c.dtype;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.head_dim_v = c.head_dim_v;
  p.mask = c.mask;
  p.softcap = c.softcap;
  if (c.mask == MaskKind::window_top_left || c.mask == MaskKind::window_bottom_right) {
    p.window_left = c.window_left;
    p.window_right = c.window_right;
  }
  if (c.sinks) p.sinks = reinterpret_cast<const float*>(sinksb);
  if (c.alibi) {
    p.alibi_slopes = reinterpret_cast<const float*>(alibib);
    p.alibi_stride_batch = c.alibi_per_batch ? c.heads_q : 0;
  }
  auto tensor = [](uintptr_t base, const View& v) {
    flashgen::TensorRef t;
    t.data = base != 0 ? reinterpret_cast<const void*>(base + 2 * static_cast<uintptr_t>(v.offset)) : nullptr;
    t.stride_batch = v.sb;
    t.stride_seq = v.ss;
    t.stride_head = v.sh;
    return t;
  };
  p.q = tensor(qb, g.q);
  p.k = tensor(kb, g.k);
  p.v = tensor(vb, g.v);
  p.o = tensor(ob, g.o);
  p.bias.kind = c.bias;
  if (c.bias != BiasKind::none) {
    p.bias.data = biasb != 0 ? reinterpret_cast<const void*>(biasb) : nullptr;
    p.bias.stride_batch = g.bias_sb;
    p.bias.stride_head = g.bias_sh;
    p.bias.stride_q = g.bias_sq;
    p.bias.stride_k = g.bias_sk;
  }
  if (c.lse && lseb != 0) {
    p.lse.data = reinterpret_cast<float*>(lseb + 4 * static_cast<uintptr_t>(g.lse.offset));
    p.lse.stride_batch = g.lse.sb;
    p.lse.stride_head = g.lse.sh;
  }
  return p;
}

/// A seed per case from std::random_device; FLASHGEN_TEST_SEED=<n> fixes it (to reproduce).
inline uint64_t case_seed() {
  if (const char* s = std::getenv("FLASHGEN_TEST_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 0);
  }
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

// ---------------------------------------------------------------------------
// Host side: inputs and reference
// ---------------------------------------------------------------------------

struct HostCase {
  Case c;
  Geometry g;
  uint64_t seed = 0;
  std::vector<uint16_t> q, k, v, bias16;
  std::vector<float> bias32;
  std::vector<float> sinks;  ///< [heads_q] (empty: none)
  std::vector<float> alibi;  ///< [heads_q] or [batch, heads_q] (empty: none)

  static uintptr_t addr(const void* p, bool nonempty) { return nonempty ? reinterpret_cast<uintptr_t>(p) : 0; }
  /// The problem over the host buffers (O and LSE point nowhere useful: the reference ignores them).
  AttentionProblem host_problem() const {
    const uintptr_t biasb = !bias32.empty() ? addr(bias32.data(), true) : addr(bias16.data(), !bias16.empty());
    return make_problem(c, g, addr(q.data(), !q.empty()), addr(k.data(), !k.empty()), addr(v.data(), !v.empty()),
                        0, biasb, 0, addr(sinks.data(), !sinks.empty()), addr(alibi.data(), !alibi.empty()));
  }
};

/// Writes uniform [-amp, amp] values (rounded to the dtype) into every element of a view.
/// A broadcast dim (stride 0) is written once.
inline void fill_view(std::vector<uint16_t>& buf, const View& v, int64_t B, int64_t S, int64_t H, int64_t d,
                      DType dt, std::mt19937_64& rng, float amp = 1.0f) {
  std::uniform_real_distribution<float> u(-amp, amp);
  const int64_t nb = v.sb == 0 ? std::min<int64_t>(B, 1) : B;
  const int64_t ns = v.ss == 0 ? std::min<int64_t>(S, 1) : S;
  const int64_t nh = v.sh == 0 ? std::min<int64_t>(H, 1) : H;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t s = 0; s < ns; ++s)
      for (int64_t h = 0; h < nh; ++h) {
        uint16_t* row = buf.data() + v.at(b, s, h);
        for (int64_t e = 0; e < d; ++e) row[e] = ref::to_dtype(dt, u(rng));
      }
}

/// Writes c.poison_value into one element of the input c.poison names: Q row
/// (last batch, middle row, head 0); K or V at the middle key of (batch 0, KV
/// head 0); v_many: V at keys seqlen_k / 2, seqlen_k / 2 + 5 and seqlen_k - 1
/// of (batch 0, KV head 0) and key 1 of (last batch, last KV head), columns
/// 5, 9, 0 and head_dim_v - 1; the bias at (batch 0, head 0, rows 2 seqlen_q / 3
/// and 10, key seqlen_k / 2). Under a causal mask each key is visible to some
/// rows and hidden from others of the same query block (a hidden key's weight
/// 0 must not meet the bad value in P.V).
inline void poison_input(HostCase& hc) {
  const Case& c = hc.c;
  const Geometry& g = hc.g;
  const uint16_t bad16 = ref::to_dtype(c.dtype, c.poison_value);
  const int64_t j = c.seqlen_k / 2;
  switch (c.poison) {
    case Poison::none: break;
    case Poison::q:
      hc.q[static_cast<size_t>(g.q.at(c.batch - 1, c.seqlen_q / 2, 0) + 3)] = bad16;
      break;
    case Poison::k:
      (g.packed ? hc.q : hc.k)[static_cast<size_t>(g.k.at(0, j, 0) + 1)] = bad16;
      break;
    case Poison::v:
      (g.packed ? hc.q : hc.v)[static_cast<size_t>(g.v.at(0, j, 0) + 5)] = bad16;
      break;
    case Poison::v_many: {
      std::vector<uint16_t>& v = g.packed ? hc.q : hc.v;
      v[static_cast<size_t>(g.v.at(0, j, 0) + 5)] = bad16;
      v[static_cast<size_t>(g.v.at(0, std::min(j + 5, c.seqlen_k - 1), 0) + 9)] = bad16;
      v[static_cast<size_t>(g.v.at(0, c.seqlen_k - 1, 0))] = bad16;
      v[static_cast<size_t>(g.v.at(c.batch - 1, std::min<int64_t>(1, c.seqlen_k - 1), c.heads_kv - 1) + c.head_dim_v - 1)] =
          bad16;
      break;
    }
    case Poison::bias: {
      // Row 2 sq/3 sees key sk/2 under every mask here; row 10 does not under a causal one.
      for (int64_t i : {2 * c.seqlen_q / 3, std::min<int64_t>(10, c.seqlen_q - 1)}) {
        const auto off = static_cast<size_t>(i * g.bias_sq + j * g.bias_sk);
        if (!hc.bias32.empty()) hc.bias32[off] = c.poison_value;
        else hc.bias16[off] = bad16;
      }
      break;
    }
  }
}

inline HostCase make_host_case(const Case& c) {
  HostCase hc;
  hc.c = c;
  hc.g = geometry(c);
  hc.seed = case_seed();
  std::mt19937_64 rng(hc.seed);
  const Geometry& g = hc.g;
  const DType dt = c.dtype;
  const uint16_t nan16 = ref::to_dtype(dt, std::numeric_limits<float>::quiet_NaN());

  hc.q.assign(static_cast<size_t>(g.q_elems), nan16);
  hc.k.assign(static_cast<size_t>(g.k_elems), nan16);
  hc.v.assign(static_cast<size_t>(g.v_elems), nan16);
  // Logits::qk: Q and K uniform in [-a, a] with a^2 * scale * sqrt(head_dim) / 3 = magnitude
  // (the spread of Qs.K); Logits::all_equal: Q = 0.
  float qk_amp = 1.0f;
  if (c.logits == Logits::qk) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    qk_amp = static_cast<float>(std::sqrt(3.0 * c.magnitude / (scale * std::sqrt(static_cast<double>(c.head_dim)))));
  }
  const float q_amp = c.logits == Logits::all_equal ? 0.0f : qk_amp;
  if (c.batch > 0 && c.seqlen_q > 0) fill_view(hc.q, g.q, c.batch, c.seqlen_q, c.heads_q, c.head_dim, dt, rng, q_amp);
  if (c.batch > 0 && c.seqlen_k > 0) {
    std::vector<uint16_t>& kbuf = g.packed ? hc.q : hc.k;
    std::vector<uint16_t>& vbuf = g.packed ? hc.q : hc.v;
    fill_view(kbuf, g.k, c.batch, c.seqlen_k, c.heads_kv, c.head_dim, dt, rng, qk_amp);
    fill_view(vbuf, g.v, c.batch, c.seqlen_k, c.heads_kv, c.head_dim_v, dt, rng);
  }

  if (g.bias_elems > 0) {
    const bool f32 = c.bias == BiasKind::f32;
    if (f32) hc.bias32.assign(static_cast<size_t>(g.bias_elems), std::numeric_limits<float>::quiet_NaN());
    else hc.bias16.assign(static_cast<size_t>(g.bias_elems), nan16);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::uniform_int_distribution<int> kind(0, 7);
    std::bernoulli_distribution sparse_inf(0.1);
    const float ninf = -std::numeric_limits<float>::infinity();
    const int64_t nb = c.bias_broadcast ? 1 : c.batch, nh = c.bias_broadcast ? 1 : c.heads_q;
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t i = 0; i < c.seqlen_q; ++i) {
          int64_t inf_prefix = 0;  // keys [0, inf_prefix) are -inf
          if (c.bias_neg_inf_rows) {
            const int r = kind(rng);
            if (r == 0) inf_prefix = c.seqlen_k;  // whole row
            if (r == 1 && c.seqlen_k > 1) inf_prefix = std::uniform_int_distribution<int64_t>(1, c.seqlen_k - 1)(rng);
            if (b == 0 && h == 0 && i == c.seqlen_q / 2) inf_prefix = c.seqlen_k;  // at least one whole row
          }
          const int64_t row = b * g.bias_sb + h * g.bias_sh + i * g.bias_sq;
          const int64_t huge_key = (i * 7919 + b * 131 + h * 17 + 13) % c.seqlen_k;  // Logits::one_huge
          const bool lowest_row = c.logits == Logits::lowest_rows && kind(rng) < 3;
          const float mag = static_cast<float>(c.magnitude);
          for (int64_t j = 0; j < c.seqlen_k; ++j) {
            float x = u(rng);
            switch (c.logits) {
              case Logits::bias_shift: x = mag + x; break;
              case Logits::all_equal: x = mag; break;
              case Logits::one_huge: x = j == huge_key ? mag : x; break;
              case Logits::lowest_rows: x = lowest_row ? std::numeric_limits<float>::lowest() : x; break;
              default: break;
            }
            if (c.bias_neg_inf && sparse_inf(rng)) x = ninf;
            if (j < inf_prefix) x = ninf;
            const auto off = static_cast<size_t>(row + j * g.bias_sk);
            if (f32) hc.bias32[off] = x;
            else hc.bias16[off] = ref::to_dtype(dt, x);
          }
        }
  }
  if (c.sinks) {
    // Around the logits' own range, so the sink matters without swamping every row.
    std::uniform_real_distribution<float> u(-2.0f, 4.0f);
    hc.sinks.resize(static_cast<size_t>(std::max<int64_t>(c.heads_q, 1)));
    for (float& x : hc.sinks) x = u(rng);
  }
  if (c.alibi) {
    // The ALiBi paper's geometric slopes 2^(-8 (h + 1) / heads), times a random factor per (batch, head).
    std::uniform_real_distribution<float> u(0.5f, 2.0f);
    const int64_t nb = c.alibi_per_batch ? std::max<int64_t>(c.batch, 1) : 1, nh = std::max<int64_t>(c.heads_q, 1);
    hc.alibi.resize(static_cast<size_t>(nb * nh));
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t h = 0; h < nh; ++h)
        hc.alibi[static_cast<size_t>(b * nh + h)] =
            u(rng) * std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(nh));
  }
  if (c.poison != Poison::none) poison_input(hc);
  return hc;
}

/// Reference values for the rows that are checked, in `rows` order.
struct RefRows {
  std::vector<ref::RowId> rows;
  std::vector<double> o;    // rows.size() * head_dim_v
  std::vector<double> lse;  // rows.size()
  ref::RowBounds bounds;    // error bounds from the logits' magnitude; rows that read NaN/inf
  bool all = false;
  /// Whether row (b, i, h) reads a NaN or inf input (all rows checked: every row is in `rows`).
  bool affected(int64_t b, int64_t i, int64_t h, const Case& c) const {
    if (!all) return false;
    return bounds.affected[static_cast<size_t>((b * c.seqlen_q + i) * c.heads_q + h)] != 0;
  }
};

inline RefRows reference(const HostCase& hc) {
  const Case& c = hc.c;
  const AttentionProblem hp = hc.host_problem();
  RefRows r;
  const int64_t total = c.total_rows();
  const int64_t want = c.rows_to_check();
  if (want >= total) {
    r.all = true;
    r.rows.reserve(static_cast<size_t>(total));
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < c.seqlen_q; ++i)
        for (int64_t h = 0; h < c.heads_q; ++h) r.rows.push_back({b, i, h});
    r.o.assign(r.rows.size() * static_cast<size_t>(c.head_dim_v), 0.0);
    r.lse.assign(r.rows.size(), 0.0);
    ref::forward_rows(hp, r.rows, r.o.data(), r.lse.data(), 0, &r.bounds);
    return r;
  }
  // A random sample, always with the first and the last row.
  std::mt19937_64 rng(hc.seed ^ 0x9E3779B97F4A7C15ull);
  std::uniform_int_distribution<int64_t> ub(0, c.batch - 1), ui(0, c.seqlen_q - 1), uh(0, c.heads_q - 1);
  std::set<std::tuple<int64_t, int64_t, int64_t>> picked;
  picked.insert({0, 0, 0});
  picked.insert({c.batch - 1, c.seqlen_q - 1, c.heads_q - 1});
  while (static_cast<int64_t>(picked.size()) < want) picked.insert({ub(rng), ui(rng), uh(rng)});
  for (const auto& [b, i, h] : picked) r.rows.push_back({b, i, h});
  r.o.assign(r.rows.size() * static_cast<size_t>(c.head_dim_v), 0.0);
  r.lse.assign(r.rows.size(), 0.0);
  ref::forward_rows(hp, r.rows, r.o.data(), r.lse.data(), 0, &r.bounds);
  return r;
}

/// Multiply-adds the reference spends on a case (rows checked x visible keys x (d + dv)).
inline double reference_cost(const Case& c) {
  if (c.total_rows() == 0 || c.seqlen_k == 0) return 0.0;
  double keys = 0.0;  // mean visible keys per query row
  for (int64_t i = 0; i < c.seqlen_q; ++i) {
    int64_t lim = c.seqlen_k;
    if (c.mask == MaskKind::causal_top_left) lim = std::min(lim, i + 1);
    if (c.mask == MaskKind::causal_bottom_right) lim = std::clamp<int64_t>(i + c.seqlen_k - c.seqlen_q + 1, 0, lim);
    if ((c.mask == MaskKind::window_top_left || c.mask == MaskKind::window_bottom_right) && c.window_left >= 0)
      lim = std::min(lim, c.window_left + std::max<int64_t>(c.window_right, 0) + 1);
    keys += static_cast<double>(lim);
  }
  keys /= static_cast<double>(c.seqlen_q);
  return static_cast<double>(c.rows_to_check()) * keys * static_cast<double>(c.head_dim + c.head_dim_v);
}

// ---------------------------------------------------------------------------
// Kernels: compiled up front, in parallel (NVRTC dominates a cold run)
// ---------------------------------------------------------------------------

struct KernelOrigin {
  std::string name;
  bool from_disk_cache = false;  ///< true: the cubin was already in the disk cache
  double seconds = 0.0;          ///< compile() wall time
  std::string error;             ///< compile() failure (the case then fails with it)
};

inline std::map<std::string, KernelOrigin>& kernel_origins() {
  static std::map<std::string, KernelOrigin> m;
  return m;
}
inline std::mutex& kernel_origins_mutex() {
  static std::mutex m;
  return m;
}

/// The stand-in LSE address of plan()-only problems: plan() refuses an LSE that
/// shares bytes with O, so it sits far above the stand-in of the other tensors
/// (0x10000000), past any extent a test problem's O can have.
inline constexpr uintptr_t kFakeLse = uintptr_t{1} << 44;

/// flashgen::compile() every distinct kernel of `cases` for `unit` (its
/// profile selected) on all host threads.
inline void precompile_unit(const std::vector<Case>& cases, const Unit& unit) {
  const int arch = flashgen::current_device().arch;
  std::vector<flashgen::KernelSpec> specs;
  std::set<std::string> seen;
  const uintptr_t fake = 0x10000000u;  // plan() checks pointers for null / alignment only
  for (const Case& c : cases) {
    const Geometry g = geometry(c);
    const AttentionProblem p =
        make_problem(c, g, g.q_elems > 0 ? fake : 0, g.k_elems > 0 ? fake : 0, g.v_elems > 0 ? fake : 0, fake,
                     g.bias_elems > 0 ? fake : 0, c.lse ? kFakeLse : 0, fake, fake);
    if (!unit.takes(c.dtype)) continue;  // reported per case as skipped
    std::vector<flashgen::KernelSpec> want;
    try {
      const int sms = flashgen::current_device().sm_count;
      if (c.decode_splits >= 0 || flashgen::decode_preferred(p, arch, sms)) {  // forward() runs those as decode
        const flashgen::DecodePlan dp = flashgen::plan_decode(p, arch, sms, std::max(c.decode_splits, 0));
        want = {dp.split, dp.combine};
      } else {
        want = {flashgen::plan(p, arch)};
      }
    } catch (const std::exception&) {
      continue;  // the case reports the error itself
    }
    std::lock_guard<std::mutex> lock(kernel_origins_mutex());
    for (const flashgen::KernelSpec& spec : want) {
      const std::string key = spec.canonical();
      if (kernel_origins().count(key) == 0 && seen.insert(key).second) specs.push_back(spec);
    }
  }
  if (specs.empty()) return;

  const auto t0 = std::chrono::steady_clock::now();
  const size_t nthreads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, specs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t n; (n = next.fetch_add(1)) < specs.size();) {
      KernelOrigin o;
      o.name = specs[n].kernel_name();
      const auto s0 = std::chrono::steady_clock::now();
      try {
        const flashgen::CompiledKernel ck = flashgen::compile(specs[n]);
        o.from_disk_cache = ck.from_cache;
      } catch (const std::exception& e) {
        o.error = e.what();
      }
      o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      std::lock_guard<std::mutex> lock(kernel_origins_mutex());
      kernel_origins()[specs[n].canonical()] = std::move(o);
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  int cached = 0, failed = 0;
  double slowest = 0.0;
  {
    std::lock_guard<std::mutex> lock(kernel_origins_mutex());
    for (const auto& s : specs) {
      const KernelOrigin& o = kernel_origins()[s.canonical()];
      cached += o.from_disk_cache ? 1 : 0;
      failed += o.error.empty() ? 0 : 1;
      slowest = std::max(slowest, o.seconds);
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  kernels: %zu %s (%s) for sm_%d in %.1f s on %zu threads: %d from the disk cache, %d compiled by NVRTC "
              "(slowest %.1f s), %d failed\n",
              specs.size(), unit.name.c_str(), unit.profile_name.c_str(), arch, wall, nthreads, cached,
              static_cast<int>(specs.size()) - cached - failed, slowest, failed);
  std::fflush(stdout);
}

/// precompile_unit for every matrix unit of the device (units.hpp).
inline void precompile(const std::vector<Case>& cases) {
  for (const Unit& u : units()) {
    UnitScope scope(u);
    precompile_unit(cases, u);
  }
}

/// Where the kernel of `spec` came from, for the per-case line.
inline std::string kernel_origin_text(const flashgen::ForwardInfo& info) {
  std::lock_guard<std::mutex> lock(kernel_origins_mutex());
  auto it = kernel_origins().find(info.spec.canonical());
  if (it == kernel_origins().end()) return info.from_cache ? "disk cache" : "NVRTC";
  if (!it->second.error.empty()) return "compile failed";
  return it->second.from_disk_cache ? "disk cache" : fmt::format("NVRTC {:.1f}s", it->second.seconds);
}

// ---------------------------------------------------------------------------
// Device side
// ---------------------------------------------------------------------------

/// Device copies of a HostCase's inputs and poisoned outputs, and the problem over them.
struct DeviceCase {
  DeviceBuffer q, k, v, o, lse, bias, sinks, alibi;
  AttentionProblem problem;

  explicit DeviceCase(const HostCase& hc) {
    rt::ensure_context();
    const Geometry& g = hc.g;
    q = DeviceBuffer(hc.q.size() * 2);
    k = DeviceBuffer(hc.k.size() * 2);
    v = DeviceBuffer(hc.v.size() * 2);
    o = DeviceBuffer(static_cast<size_t>(g.o_elems) * 2);
    lse = DeviceBuffer(static_cast<size_t>(g.lse_elems) * 4);
    bias = DeviceBuffer(!hc.bias32.empty() ? hc.bias32.size() * 4 : hc.bias16.size() * 2);
    q.upload(hc.q);
    k.upload(hc.k);
    v.upload(hc.v);
    if (!hc.bias32.empty()) bias.upload(hc.bias32);
    if (!hc.bias16.empty()) bias.upload(hc.bias16);
    sinks = DeviceBuffer(hc.sinks.size() * 4);
    alibi = DeviceBuffer(hc.alibi.size() * 4);
    sinks.upload(hc.sinks);
    alibi.upload(hc.alibi);
    poison();
    problem = make_problem(hc.c, g, q.address(), k.address(), v.address(), o.address(), bias.address(),
                           lse.address(), sinks.address(), alibi.address());
  }

  void poison() {
    if (o.bytes() > 0) rt::check(drv().cuMemsetD16(o.get(), kPoison16, o.bytes() / 2), "cuMemsetD16");
    if (lse.bytes() > 0) rt::check(drv().cuMemsetD32(lse.get(), kPoison32, lse.bytes() / 4), "cuMemsetD32");
    rt::check(drv().cuCtxSynchronize(), "cuCtxSynchronize");
  }
};

/// Outcome of one case.
struct CaseResult {
  bool ok = true;
  std::string line;                 ///< one-line summary
  std::vector<std::string> errors;  ///< what failed (first offenders, counts)
  double max_err_o = 0.0, max_err_lse = 0.0;
  int64_t rows_checked = 0, rows_no_key = 0;
  int64_t rows_affected = 0;        ///< rows that read a NaN/inf input (not compared)
  bool launched = false;
  double ref_seconds = 0.0;
  uint64_t seed = 0;

  void fail(std::string what) {
    ok = false;
    errors.push_back(std::move(what));
  }
};

/// Checks O: every element of the view written (not the poison, not NaN), every
/// other element of the allocation still the poison.
inline void check_o_poison(const HostCase& hc, const RefRows& rr, const std::vector<uint16_t>& o_dev, CaseResult& res) {
  const Case& c = hc.c;
  const Geometry& g = hc.g;
  std::vector<uint8_t> covered(o_dev.size(), 0);
  int64_t unwritten = 0, nans = 0;
  std::string first_unwritten, first_nan;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const int64_t base = g.o.at(b, i, h);
        for (int64_t d = 0; d < c.head_dim_v; ++d) {
          const auto e = static_cast<size_t>(base + d);
          covered[e] = 1;
          const uint16_t bits = o_dev[e];
          if (bits == kPoison16) {
            if (unwritten++ == 0) first_unwritten = fmt::format("O[b={},i={},h={},d={}]", b, i, h, d);
          } else if (is_nan16(c.dtype, bits) && !rr.affected(b, i, h, c)) {
            if (nans++ == 0) first_nan = fmt::format("O[b={},i={},h={},d={}] = 0x{:04x}", b, i, h, d, bits);
          }
        }
      }
  if (unwritten > 0) res.fail(fmt::format("{} O elements never written (still poison), first {}", unwritten, first_unwritten));
  if (nans > 0) res.fail(fmt::format("{} O elements are NaN, first {}", nans, first_nan));

  int64_t outside = 0;
  std::string first_outside;
  const auto n = static_cast<int64_t>(o_dev.size());
  for (int64_t e = 0; e < n; ++e) {
    if (covered[static_cast<size_t>(e)] || o_dev[static_cast<size_t>(e)] == kPoison16) continue;
    if (outside++ == 0) {
      const char* where = e < kOutGuard ? "guard band before O" : e >= n - kOutGuard ? "guard band after O" : "O padding";
      first_outside = fmt::format("element {} of the O buffer ({}) = 0x{:04x}", e, where, o_dev[static_cast<size_t>(e)]);
    }
  }
  if (outside > 0) res.fail(fmt::format("{} elements written outside the O view, first {}", outside, first_outside));
}

/// Same for LSE ([b, h, i] view inside guard bands / padding).
inline void check_lse_poison(const HostCase& hc, const RefRows& rr, const std::vector<float>& lse_dev, CaseResult& res) {
  const Case& c = hc.c;
  const Geometry& g = hc.g;
  auto bits_of = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  std::vector<uint8_t> covered(lse_dev.size(), 0);
  int64_t unwritten = 0, nans = 0;
  std::string first_unwritten, first_nan;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.seqlen_q; ++i) {
        const auto e = static_cast<size_t>(g.lse.offset + b * g.lse.sb + h * g.lse.sh + i);
        covered[e] = 1;
        if (bits_of(lse_dev[e]) == kPoison32) {
          if (unwritten++ == 0) first_unwritten = fmt::format("LSE[b={},h={},i={}]", b, h, i);
        } else if (std::isnan(lse_dev[e]) && !rr.affected(b, i, h, c)) {
          if (nans++ == 0) first_nan = fmt::format("LSE[b={},h={},i={}]", b, h, i);
        }
      }
  if (unwritten > 0) res.fail(fmt::format("{} LSE elements never written (still poison), first {}", unwritten, first_unwritten));
  if (nans > 0) res.fail(fmt::format("{} LSE elements are NaN, first {}", nans, first_nan));
  int64_t outside = 0;
  std::string first_outside;
  for (size_t e = 0; e < lse_dev.size(); ++e) {
    if (covered[e] || bits_of(lse_dev[e]) == kPoison32) continue;
    if (outside++ == 0) first_outside = fmt::format("element {} of the LSE buffer = {}", e, lse_dev[e]);
  }
  if (outside > 0) res.fail(fmt::format("{} elements written outside the LSE view, first {}", outside, first_outside));
}

/// Compares the checked rows with the reference.
inline void check_values(const HostCase& hc, const RefRows& rr, const std::vector<uint16_t>& o_dev,
                         const std::vector<float>& lse_dev, CaseResult& res) {
  const Case& c = hc.c;
  const Geometry& g = hc.g;
  const double atol = o_atol(c.dtype), rtol = lse_rtol(c.dtype);
  const double ninf = -std::numeric_limits<double>::infinity();
  int64_t bad_o = 0, bad_lse = 0;
  std::string first_o, first_lse;
  for (size_t r = 0; r < rr.rows.size(); ++r) {
    const ref::RowId& id = rr.rows[r];
    if (rr.bounds.affected[r]) {  // reads NaN/inf: may be anything, NaN included
      ++res.rows_affected;
      continue;
    }
    const bool no_key = rr.lse[r] == ninf;
    res.rows_no_key += no_key ? 1 : 0;
    const int64_t base = g.o.at(id.b, id.i, id.h);
    for (int64_t d = 0; d < c.head_dim_v; ++d) {
      const double got = ref::from_dtype(c.dtype, o_dev[static_cast<size_t>(base + d)]);
      const double want = rr.o[r * static_cast<size_t>(c.head_dim_v) + static_cast<size_t>(d)];
      const double err = std::fabs(got - want);
      bool bad;
      if (no_key) {
        bad = !(got == 0.0);
      } else {
        bad = !(err <= atol + rr.bounds.o_err[r * static_cast<size_t>(c.head_dim_v) + static_cast<size_t>(d)]);
      }
      if (std::isfinite(err)) res.max_err_o = std::max(res.max_err_o, err);
      if (bad && bad_o++ == 0) {
        first_o = fmt::format("O[b={},i={},h={},d={}] = {:.6g}, expected {:.6g} (|err| {:.3g}, atol {:.1g} + bound {:.2g}{})",
                              id.b, id.i, id.h, d, got, want, err, atol,
                              rr.bounds.o_err[r * static_cast<size_t>(c.head_dim_v) + static_cast<size_t>(d)],
                              no_key ? "; the row sees no key: must be 0" : "");
      }
    }
    if (c.lse) {
      const double got = lse_dev[static_cast<size_t>(g.lse.offset + id.b * g.lse.sb + id.h * g.lse.sh + id.i)];
      const double want = rr.lse[r];
      bool bad;
      if (no_key) {
        bad = !(got == ninf);
      } else {
        // ln(sum) to rtol, the row max to its fp32 spacing and the logits' bound (RowBounds).
        const double err = std::fabs(got - want);
        const double tol = rtol * std::max(1.0, std::fabs(want - rr.bounds.row_max[r])) + rr.bounds.lse_err[r];
        bad = !(std::isfinite(got) && err <= tol);
        if (std::isfinite(err)) res.max_err_lse = std::max(res.max_err_lse, err);
        if (bad && bad_lse++ == 0) {
          first_lse = fmt::format("LSE[b={},h={},i={}] = {:.9g}, expected {:.9g} (|err| {:.3g}, tol {:.3g})", id.b,
                                  id.h, id.i, got, want, err, tol);
        }
      }
    }
  }
  res.rows_checked = static_cast<int64_t>(rr.rows.size());
  if (bad_o > 0) res.fail(fmt::format("{} O elements off, first {}; max |err| {:.3g}", bad_o, first_o, res.max_err_o));
  if (bad_lse > 0) res.fail(fmt::format("{} LSE values off, first {}; max |err| {:.3g}", bad_lse, first_lse, res.max_err_lse));
}

/// Inputs must come back bit-identical (nothing written into Q, K, V, bias).
template <class T>
inline void check_unchanged(const char* name, const std::vector<T>& host, const DeviceBuffer& dev, CaseResult& res) {
  if (host.empty()) return;
  const std::vector<T> back = dev.template download<T>();
  if (back.size() != host.size()) {
    res.fail(fmt::format("input buffer {} came back with {} elements, not {}", name, back.size(), host.size()));
  } else if (std::memcmp(back.data(), host.data(), host.size() * sizeof(T)) != 0) {
    size_t first = 0;
    while (first < host.size() && std::memcmp(&back[first], &host[first], sizeof(T)) == 0) ++first;
    res.fail(fmt::format("input buffer {} was modified (first at element {})", name, first));
  }
}

/// A device copy of `host`.
template <class T>
DeviceBuffer uploaded(const std::vector<T>& host) {
  DeviceBuffer d(host.size() * sizeof(T));
  d.upload(host);
  return d;
}

inline std::string summary_line(const Case& c, const CaseResult& r, const std::string& kernel) {
  return fmt::format("{:<86} | {:<13} | rows {}/{}{} | max|dO| {:.2e} max|dLSE| {:.2e} | {}", c.str(), kernel,
                     r.rows_checked, c.total_rows(),
                     (r.rows_no_key > 0 ? fmt::format(" ({} no-key)", r.rows_no_key) : "") +
                         (r.rows_affected > 0 ? fmt::format(" ({} read NaN/inf)", r.rows_affected) : ""),
                     r.max_err_o, r.max_err_lse, r.ok ? "ok" : fmt::format("FAIL (seed {})", r.seed));
}

/// Runs one case end to end on every matrix unit of the device (units.hpp):
/// inputs and the reference once, then per unit poison, forward (the unit's
/// profile selected), every check. One summary line per unit; the result is
/// ok only when every unit is. A unit without the case's dtype (m8n8k4 and
/// bf16) reports the case as skipped for it.
inline CaseResult run_case(const Case& c) {
  CaseResult all;
  std::vector<std::string> lines;
  try {
    const HostCase hc = make_host_case(c);
    all.seed = hc.seed;
    DeviceCase dc(hc);
    Stream stream;
    std::optional<RefRows> rr;
    for (const Unit& u : units()) {
      CaseResult res;
      res.seed = hc.seed;
      std::string kernel = u.name + " -";
      if (!u.takes(c.dtype)) {
        lines.push_back(fmt::format("{:<86} | {:<22} | skipped: {} takes {} only", c.str(), u.name, u.profile_name,
                                    u.dtypes.size() == 1 ? flashgen::to_string(u.dtypes[0]) : "other dtypes"));
        continue;
      }
      try {
        UnitScope scope(u);
        dc.poison();
        flashgen::ForwardInfo info;
        if (c.decode_splits >= 0) {
          // Split-KV decode: plan_decode for this unit's profile (a refusal is
          // reported as skipped), the caller's NaN-poisoned workspace or the
          // library's.
          const flashgen::DeviceInfo dev = flashgen::current_device();
          flashgen::DecodePlan dp;
          try {
            dp = flashgen::plan_decode(dc.problem, dev.arch, dev.sm_count, c.decode_splits);
          } catch (const flashgen::Unsupported& e) {
            lines.push_back(fmt::format("{:<86} | {:<22} | skipped: {}", c.str(), u.name, e.what()));
            continue;
          }
          flashgen::DecodeOptions opt;
          opt.plan = &dp;
          DeviceBuffer ws;
          if (c.decode_caller_workspace) {
            ws = DeviceBuffer(static_cast<size_t>(dp.workspace_bytes));
            rt::check(drv().cuMemsetD32(ws.get(), 0x7fc00000u, ws.bytes() / 4), "cuMemsetD32 (workspace NaN)");
            opt.workspace = reinterpret_cast<void*>(ws.get());
            opt.workspace_bytes = dp.workspace_bytes;
          }
          const flashgen::DecodeInfo di = flashgen::decode(dc.problem, stream.get(), opt);
          stream.sync();
          if (c.decode_splits > 0 && di.plan.num_splits != c.decode_splits)
            res.fail(fmt::format("decode ran {} splits, asked for {}", di.plan.num_splits, c.decode_splits));
          info.spec = di.plan.split;
          info.launched = di.launched;
          info.from_cache = true;
        } else {
          info = flashgen::forward(dc.problem, stream.get());
          stream.sync();
        }
        res.launched = info.launched;
        kernel = u.name + " " + (info.launched ? kernel_origin_text(info) : "no launch");
        // The wgmma unit's profile serves head dims that are not multiples of 16,
        // and K/V rows repeated through stride_seq 0 (TMA cannot), with its m16n8k16 tiles.
        const bool fallback = u.name == "wgmma" && info.spec.unit == flashgen::MatrixUnit::m16n8k16 &&
                              (info.spec.family == flashgen::KernelFamily::fwd_split || c.head_dim % 16 != 0 || c.head_dim_v % 16 != 0 ||
                               (c.layout == Layout::kv_row_broadcast && c.seqlen_k > 1));
        if (info.launched && info.spec.unit != flashgen::parse_matrix_unit(u.name) && !fallback)
          res.fail(fmt::format("planned unit {} instead of {}", flashgen::to_string(info.spec.unit), u.name));
        const bool expect_launch = c.batch > 0 && c.seqlen_q > 0 && c.heads_q > 0;
        if (info.launched != expect_launch) {
          res.fail(fmt::format("forward() reported launched = {}, expected {}", info.launched, expect_launch));
        }

        const std::vector<uint16_t> o_dev = dc.o.download<uint16_t>();
        const std::vector<float> lse_dev = dc.lse.download<float>();
        if (!rr) {
          const auto t0 = std::chrono::steady_clock::now();
          rr = reference(hc);
          all.ref_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        check_o_poison(hc, *rr, o_dev, res);
        if (c.lse) check_lse_poison(hc, *rr, lse_dev, res);
        check_unchanged(hc.g.packed ? "QKV" : "Q", hc.q, dc.q, res);
        check_unchanged("K", hc.k, dc.k, res);
        check_unchanged("V", hc.v, dc.v, res);
        check_unchanged("bias", hc.bias16, dc.bias, res);
        check_unchanged("bias", hc.bias32, dc.bias, res);

        check_values(hc, *rr, o_dev, lse_dev, res);
        if (c.poison != Poison::none) {
          // Not vacuous: some rows read the bad value and some rows do not.
          if (!rr->all) res.fail("a poison case must check every row (sample_rows 0)");
          if (res.rows_affected == 0 || res.rows_affected == res.rows_checked)
            res.fail(fmt::format("{} of {} rows read the poisoned input; the case needs both kinds",
                                 res.rows_affected, res.rows_checked));
        }
      } catch (const std::exception& e) {
        res.fail(std::string("exception: ") + e.what());
      }
      lines.push_back(summary_line(c, res, kernel));
      all.launched = all.launched || res.launched;
      all.max_err_o = std::max(all.max_err_o, res.max_err_o);
      all.max_err_lse = std::max(all.max_err_lse, res.max_err_lse);
      all.rows_checked = std::max(all.rows_checked, res.rows_checked);
      all.rows_no_key = std::max(all.rows_no_key, res.rows_no_key);
      for (const std::string& e : res.errors) all.fail("[" + u.name + "] " + e);
    }
  } catch (const std::exception& e) {
    all.fail(std::string("exception: ") + e.what());
    lines.push_back(summary_line(c, all, "-"));
  }
  for (const std::string& l : lines) all.line += (all.line.empty() ? "" : "\n  ") + l;
  return all;
}

}  // namespace fgtest
