// The C ABI (include/flashgen/flashgen.h) over the C++ API. Every exception is
// caught here and turned into a status code plus a thread-local message.
#include "flashgen/flashgen.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "flashgen/flashgen.hpp"
#include "gen/limits.hpp"
#include "runtime/compile.hpp"
#include "runtime/launch.hpp"
#include "runtime/tune_internal.hpp"

namespace {

using namespace flashgen;

static_assert(FLASHGEN_ERROR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::invalid_argument));
static_assert(FLASHGEN_ERROR_UNSUPPORTED == static_cast<int>(ErrorCode::unsupported));
static_assert(FLASHGEN_ERROR_COMPILE_FAILED == static_cast<int>(ErrorCode::compile_failed));
static_assert(FLASHGEN_ERROR_DRIVER == static_cast<int>(ErrorCode::driver));
static_assert(FLASHGEN_ERROR_UNAVAILABLE == static_cast<int>(ErrorCode::unavailable));
static_assert(FLASHGEN_ERROR_IO == static_cast<int>(ErrorCode::io));
static_assert(FLASHGEN_ERROR_INTERNAL == static_cast<int>(ErrorCode::internal));

thread_local std::string t_last_error;

flashgen_status fail(flashgen_status code, const std::string& message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {
    // Out of memory while copying the message: keep the previous text.
  }
  return code;
}

// Runs `body` (returning void); maps every exception to a status.
template <typename F>
flashgen_status guarded(const char* fn, F&& body) noexcept {
  try {
    body();
    return FLASHGEN_OK;
  } catch (const flashgen::Error& e) {
    // Every message names the C function, as its own argument checks do (the C++ checks behind
    // it name a field, or their C++ function).
    const std::string_view what = e.what(), prefix = fn;
    const bool named = what.starts_with(prefix) && what.substr(prefix.size()).starts_with(": ");
    return fail(static_cast<flashgen_status>(static_cast<int>(e.code())),
                named ? std::string(what) : fmt::format("{}: {}", fn, what));
  } catch (const std::bad_alloc&) {
    return fail(FLASHGEN_ERROR_INTERNAL, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(FLASHGEN_ERROR_INTERNAL,
                std::string(fn) + ": internal error (a bug in libflashgen): " + e.what());
  } catch (...) {
    return fail(FLASHGEN_ERROR_INTERNAL,
                std::string(fn) + ": internal error (a bug in libflashgen): unknown exception");
  }
}

void require_non_null(const void* p, const char* fn, const char* arg) {
  if (p == nullptr) throw InvalidArgument(fmt::format("{}: {} is NULL; pass a valid pointer", fn, arg));
}

// decode() and plan_decode() name their C++ arguments (`options.num_splits`,
// `options.workspace`, `options.workspace_bytes`, "decode:", "plan_decode:",
// decode_workspace_bytes); the C calls take them as plain arguments. Runs
// `body` and rethrows its InvalidArgument / Unsupported with the C names and
// `fn` as the prefix.
template <class F>
void with_c_names(const char* fn, F&& body) {
  auto rename = [&](std::string m) {
    auto replace_all = [&m](std::string_view from, std::string_view to) {
      for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size()))
        m.replace(at, from.size(), to);
    };
    for (std::string_view prefix : {"decode: ", "plan_decode: "})
      if (m.starts_with(prefix)) m = std::string(fn) + ": " + m.substr(prefix.size());
    replace_all("options.workspace_bytes", "workspace_bytes");
    replace_all("options.workspace", "workspace");
    replace_all("options.num_splits", "num_splits");
    replace_all("(decode_workspace_bytes)", "(flashgen_decode_workspace_bytes)");
    return m;
  };
  try {
    body();
  } catch (const Unsupported& e) {
    throw Unsupported(rename(e.what()));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(rename(e.what()));
  }
}

DType to_dtype(int v, const char* fn) {
  switch (v) {
    case FLASHGEN_DTYPE_F16: return DType::f16;
    case FLASHGEN_DTYPE_BF16: return DType::bf16;
    default:
      throw InvalidArgument(fmt::format(
          "{}: dtype = {} is not a flashgen_dtype (allowed: FLASHGEN_DTYPE_F16 = 0, "
          "FLASHGEN_DTYPE_BF16 = 1)",
          fn, v));
  }
}

MaskKind to_mask(int v, const char* fn) {
  switch (v) {
    case FLASHGEN_MASK_NONE: return MaskKind::none;
    case FLASHGEN_MASK_CAUSAL_TOP_LEFT: return MaskKind::causal_top_left;
    case FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT: return MaskKind::causal_bottom_right;
    case FLASHGEN_MASK_WINDOW_TOP_LEFT: return MaskKind::window_top_left;
    case FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT: return MaskKind::window_bottom_right;
    default:
      throw InvalidArgument(fmt::format(
          "{}: mask = {} is not a flashgen_mask (allowed: FLASHGEN_MASK_NONE = 0, "
          "FLASHGEN_MASK_CAUSAL_TOP_LEFT = 1, FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT = 2, "
          "FLASHGEN_MASK_WINDOW_TOP_LEFT = 3, FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT = 4)",
          fn, v));
  }
}

BiasKind to_bias(int v, const char* fn) {
  switch (v) {
    case FLASHGEN_BIAS_NONE: return BiasKind::none;
    case FLASHGEN_BIAS_INPUT: return BiasKind::input;
    case FLASHGEN_BIAS_F32: return BiasKind::f32;
    default:
      throw InvalidArgument(fmt::format(
          "{}: bias.kind = {} is not a flashgen_bias_kind (allowed: FLASHGEN_BIAS_NONE = 0, "
          "FLASHGEN_BIAS_INPUT = 1, FLASHGEN_BIAS_F32 = 2)",
          fn, v));
  }
}

TensorRef to_tensor(const flashgen_tensor& t) {
  TensorRef r;
  r.data = t.data;
  r.stride_batch = t.stride_batch;
  r.stride_seq = t.stride_seq;
  r.stride_head = t.stride_head;
  return r;
}

flashgen_tensor from_tensor(const TensorRef& t) {
  flashgen_tensor r;
  r.data = t.data;
  r.stride_batch = t.stride_batch;
  r.stride_seq = t.stride_seq;
  r.stride_head = t.stride_head;
  return r;
}

// The C struct as an AttentionProblem (enums checked; the rest is checked by
// check_problem in plan / launch).
AttentionProblem to_problem(const flashgen_problem* c, const char* fn) {
  require_non_null(c, fn, "problem");
  AttentionProblem p;
  p.dtype = to_dtype(static_cast<int>(c->dtype), fn);
  p.batch = c->batch;
  p.seqlen_q = c->seqlen_q;
  p.seqlen_k = c->seqlen_k;
  p.heads_q = c->heads_q;
  p.heads_kv = c->heads_kv;
  p.head_dim = c->head_dim;
  p.head_dim_v = c->head_dim_v;
  p.mask = to_mask(static_cast<int>(c->mask), fn);
  if (c->has_scale != 0) p.softmax_scale = c->scale;
  p.q = to_tensor(c->q);
  p.k = to_tensor(c->k);
  p.v = to_tensor(c->v);
  p.o = to_tensor(c->o);
  p.bias.kind = to_bias(static_cast<int>(c->bias.kind), fn);
  p.bias.data = c->bias.data;
  p.bias.stride_batch = c->bias.stride_batch;
  p.bias.stride_head = c->bias.stride_head;
  p.bias.stride_q = c->bias.stride_q;
  p.bias.stride_k = c->bias.stride_k;
  p.lse.data = c->lse.data;
  p.lse.stride_batch = c->lse.stride_batch;
  p.lse.stride_head = c->lse.stride_head;
  p.softcap = c->softcap;
  p.window_left = c->window_left;
  p.window_right = c->window_right;
  p.sinks = c->sinks;
  p.alibi_slopes = c->alibi_slopes;
  p.alibi_stride_batch = c->alibi_stride_batch;
  p.cu_seqlens_q = c->cu_seqlens_q;
  p.cu_seqlens_k = c->cu_seqlens_k;
  p.seqused_k = c->seqused_k;
  p.total_q = c->total_q;
  p.total_k = c->total_k;
  p.page_table = c->page_table;
  p.page_table_stride = c->page_table_stride;
  p.page_size = c->page_size;
  p.num_pages = c->num_pages;
  return p;
}

StateDType to_state_dtype(int v, const char* fn, const char* what) {
  switch (v) {
    case FLASHGEN_STATE_F32: return StateDType::f32;
    case FLASHGEN_STATE_F16: return StateDType::f16;
    case FLASHGEN_STATE_BF16: return StateDType::bf16;
    default:
      throw InvalidArgument(fmt::format(
          "{}: {} = {} is not a flashgen_state_dtype (allowed: FLASHGEN_STATE_F32 = 0, FLASHGEN_STATE_F16 = 1, "
          "FLASHGEN_STATE_BF16 = 2)",
          fn, what, v));
  }
}

// The C struct as a MergeProblem (enums checked; the rest is checked by
// check_merge_problem in plan / launch).
MergeProblem to_merge_problem(const flashgen_merge_problem* c, const char* fn) {
  require_non_null(c, fn, "problem");
  MergeProblem p;
  p.partial_dtype = to_state_dtype(static_cast<int>(c->partial_dtype), fn, "partial_dtype");
  p.out_dtype = to_state_dtype(static_cast<int>(c->out_dtype), fn, "out_dtype");
  p.num_states = c->num_states;
  p.batch = c->batch;
  p.seqlen_q = c->seqlen_q;
  p.heads = c->heads;
  p.head_dim_v = c->head_dim_v;
  p.o_partial.data = c->o_partial.data;
  p.o_partial.stride_state = c->o_partial.stride_state;
  p.o_partial.stride_batch = c->o_partial.stride_batch;
  p.o_partial.stride_seq = c->o_partial.stride_seq;
  p.o_partial.stride_head = c->o_partial.stride_head;
  p.lse_partial.data = c->lse_partial.data;
  p.lse_partial.stride_state = c->lse_partial.stride_state;
  p.lse_partial.stride_batch = c->lse_partial.stride_batch;
  p.lse_partial.stride_head = c->lse_partial.stride_head;
  p.lse_partial.stride_seq = c->lse_partial.stride_seq;
  p.o = to_tensor(c->o);
  p.lse.data = c->lse.data;
  p.lse.stride_batch = c->lse.stride_batch;
  p.lse.stride_head = c->lse.stride_head;
  return p;
}

// Writes the canonical string of `spec` to spec_out (capacity spec_out_len).
void write_spec(const KernelSpec& spec, char* spec_out, size_t spec_out_len, const char* fn) {
  const std::string text = spec.canonical();
  if (text.size() + 1 > spec_out_len)
    throw InvalidArgument(fmt::format(
        "{}: spec_out_len = {} is too small; the canonical spec \"{}\" needs {} bytes including "
        "the terminating NUL",
        fn, spec_out_len, text, text.size() + 1));
  std::memcpy(spec_out, text.c_str(), text.size() + 1);
}

// The C ABI's arch arguments: a compute capability as 10*major+minor in [kMinArch, kMaxArch],
// or (allow_current) 0 for this machine's GPU. One message style for every function, naming
// the C function (the C++ checks behind it would name plan()).
void check_arch_arg(int arch, const char* fn, bool allow_current = true) {
  if ((allow_current && arch == 0) || (arch >= gen::kMinArch && arch <= gen::kMaxArch)) return;
  throw InvalidArgument(fmt::format("{}: arch = {}; allowed: {}a compute capability as 10*major+minor in [{}, {}] "
                                    "(e.g. 90){}",
                                    fn, arch, allow_current ? "0 for this machine's GPU, or " : "", gen::kMinArch,
                                    gen::kMaxArch,
                                    allow_current ? "" : " (flashgen_plan with arch 0 plans for this machine's GPU)"));
}

// Runs `body`, which asks for this machine's GPU because an argument was 0 ("arch", "sm_count":
// `zeros`, the ones that were). Without a GPU its Unavailable error says what to pass instead.
template <class F>
void current_gpu(const std::vector<std::string_view>& zeros, F&& body) {
  try {
    body();
  } catch (const Unavailable& e) {
    std::string instead;
    for (std::string_view z : zeros) {
      if (!instead.empty()) instead += " and ";
      instead += z == "arch" ? "arch = 10*major+minor (e.g. 90)" : fmt::format("{} = the GPU's count (e.g. 132)", z);
    }
    std::string_view what = e.what();
    if (what.ends_with('.')) what.remove_suffix(1);  // (the clause follows it)
    throw Unavailable(fmt::format("{}; without a GPU pass {} instead of 0", what, instead));
  }
}

KernelSpec parse_spec(const char* spec, const char* fn) {
  require_non_null(spec, fn, "spec");
  return KernelSpec::parse(spec);
}

}  // namespace

extern "C" {

const char* flashgen_last_error(void) { return t_last_error.c_str(); }

flashgen_status flashgen_problem_init_bshd(flashgen_problem* problem, flashgen_dtype dtype,
                                           int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
                                           int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                                           int64_t head_dim_v, flashgen_mask mask, const void* q,
                                           const void* k, const void* v, void* o) {
  const char* fn = "flashgen_problem_init_bshd";
  return guarded(fn, [&] {
    require_non_null(problem, fn, "problem");
    const DType dt = to_dtype(static_cast<int>(dtype), fn);
    const MaskKind mk = to_mask(static_cast<int>(mask), fn);
    const struct {
      const char* name;
      int64_t value;
    } sizes[] = {{"batch", batch},       {"seqlen_q", seqlen_q}, {"seqlen_k", seqlen_k},
                 {"heads_q", heads_q},   {"heads_kv", heads_kv}, {"head_dim", head_dim},
                 {"head_dim_v", head_dim_v}};
    for (const auto& s : sizes)
      if (s.value < 0)
        throw InvalidArgument(fmt::format("{}: {} = {} is negative; sizes must be >= 0", fn,
                                          s.name, s.value));
    AttentionProblem p = make_bshd_problem(dt, batch, seqlen_q, seqlen_k, heads_q, heads_kv,
                                           head_dim, head_dim_v, mk, q, k, v, o);
    flashgen_problem c;
    std::memset(&c, 0, sizeof c);
    c.dtype = dtype;
    c.batch = p.batch;
    c.seqlen_q = p.seqlen_q;
    c.seqlen_k = p.seqlen_k;
    c.heads_q = p.heads_q;
    c.heads_kv = p.heads_kv;
    c.head_dim = p.head_dim;
    c.head_dim_v = p.head_dim_v;
    c.mask = mask;
    c.has_scale = 0;
    c.scale = 0.0f;
    c.q = from_tensor(p.q);
    c.k = from_tensor(p.k);
    c.v = from_tensor(p.v);
    c.o = from_tensor(p.o);
    c.bias.kind = FLASHGEN_BIAS_NONE;
    c.lse.data = nullptr;
    c.softcap = 0.0f;
    c.window_left = -1;
    c.window_right = -1;
    c.sinks = nullptr;
    c.alibi_slopes = nullptr;
    c.alibi_stride_batch = 0;
    c.cu_seqlens_q = nullptr;  // a dense batch
    c.cu_seqlens_k = nullptr;
    c.seqused_k = nullptr;
    c.total_q = 0;
    c.total_k = 0;
    c.page_table = nullptr;  // contiguous K/V
    c.page_table_stride = 0;
    c.page_size = 0;
    c.num_pages = 0;
    *problem = c;
  });
}

flashgen_status flashgen_plan(const flashgen_problem* problem, int arch, char* spec_out,
                              size_t spec_out_len) {
  const char* fn = "flashgen_plan";
  return guarded(fn, [&] {
    AttentionProblem p = to_problem(problem, fn);
    require_non_null(spec_out, fn, "spec_out");
    check_arch_arg(arch, fn);
    KernelSpec spec;
    if (arch != 0)
      spec = plan(p, arch);
    else
      current_gpu({"arch"}, [&] { spec = plan(p); });
    write_spec(spec, spec_out, spec_out_len, fn);
  });
}

flashgen_status flashgen_plan_for_device(const flashgen_problem* problem, int arch, const char* device_name,
                                         char* spec_out, size_t spec_out_len) {
  const char* fn = "flashgen_plan_for_device";
  return guarded(fn, [&] {
    AttentionProblem p = to_problem(problem, fn);
    require_non_null(spec_out, fn, "spec_out");
    check_arch_arg(arch, fn, /*allow_current=*/false);  // (the named device's arch)
    if (device_name == nullptr || *device_name == '\0')
      throw InvalidArgument(fmt::format(
          "{}: device_name is {}; pass a device name as tune files record it (e.g. \"NVIDIA H200\"), or use "
          "flashgen_plan for this machine's GPU",
          fn, device_name == nullptr ? "NULL" : "empty"));
    if (const std::string why = rt::device_name_problem(device_name); !why.empty())
      throw InvalidArgument(fmt::format("{}: device_name {} {}", fn, rt::shown_device_name(device_name), why));
    write_spec(rt::plan_for_device(p, arch, device_name), spec_out, spec_out_len, fn);
  });
}

flashgen_status flashgen_generate(const char* spec, char** source_out) {
  const char* fn = "flashgen_generate";
  if (source_out != nullptr) *source_out = nullptr;
  return guarded(fn, [&] {
    require_non_null(source_out, fn, "source_out");
    const KernelSpec s = parse_spec(spec, fn);
    const std::string source = generate(s);
    char* buf = static_cast<char*>(std::malloc(source.size() + 1));
    if (buf == nullptr) throw std::bad_alloc();
    std::memcpy(buf, source.c_str(), source.size() + 1);
    *source_out = buf;
  });
}

void flashgen_free(void* p) { std::free(p); }

flashgen_status flashgen_forward(const flashgen_problem* problem, flashgen_stream stream) {
  const char* fn = "flashgen_forward";
  return guarded(fn, [&] {
    AttentionProblem p = to_problem(problem, fn);
    forward(p, stream);
  });
}

flashgen_status flashgen_decode_workspace_bytes(const flashgen_problem* problem, int arch, int sm_count,
                                                int num_splits, int64_t* bytes, int* num_splits_out) {
  const char* fn = "flashgen_decode_workspace_bytes";
  return guarded(fn, [&] {
    if (bytes == nullptr) throw InvalidArgument(fmt::format("{}: bytes is NULL", fn));
    const AttentionProblem p = to_problem(problem, fn);
    check_arch_arg(arch, fn);
    if (sm_count < 0)
      throw InvalidArgument(fmt::format("{}: sm_count = {}; allowed: 0 for this machine's GPU's SM count, or at least 1",
                                        fn, sm_count));
    // Bad input is reported before a missing GPU (as flashgen_plan does).
    with_c_names(fn, [&] {
      check_problem(p);
      rt::check_decode_num_splits(num_splits);
    });
    // The SM count only chooses num_splits: with num_splits given it is not asked for.
    const bool need_sms = sm_count == 0 && num_splits == 0;
    if (num_splits != 0 && sm_count == 0) sm_count = 1;
    if (arch == 0 || need_sms) {  // the current device's (needs a GPU)
      std::vector<std::string_view> zeros;
      if (arch == 0) zeros.emplace_back("arch");
      if (need_sms) zeros.emplace_back("sm_count");
      DeviceInfo dev;
      current_gpu(zeros, [&] { dev = current_device(); });
      if (arch == 0) arch = dev.arch;
      if (need_sms) sm_count = dev.sm_count;
    }
    DecodePlan dp;
    with_c_names(fn, [&] { dp = plan_decode(p, arch, sm_count, num_splits); });
    *bytes = dp.workspace_bytes;
    if (num_splits_out != nullptr) *num_splits_out = dp.num_splits;
  });
}

flashgen_status flashgen_decode(const flashgen_problem* problem, int num_splits, void* workspace,
                                int64_t workspace_bytes, flashgen_stream stream) {
  const char* fn = "flashgen_decode";
  return guarded(fn, [&] {
    const AttentionProblem p = to_problem(problem, fn);
    DecodeOptions o;
    o.num_splits = num_splits;
    o.workspace = workspace;
    o.workspace_bytes = workspace_bytes;
    with_c_names(fn, [&] { decode(p, stream, o); });
  });
}

flashgen_status flashgen_launch_spec(const char* spec, const flashgen_problem* problem,
                                     flashgen_stream stream) {
  const char* fn = "flashgen_launch_spec";
  return guarded(fn, [&] {
    const KernelSpec s = parse_spec(spec, fn);
    AttentionProblem p = to_problem(problem, fn);
    check_problem(p);
    rt::check_problem_matches_spec(p, s);
    if (p.empty()) {
      require_valid(s, profile_for_arch(s.arch));
      return;  // empty problem: nothing to launch, no GPU needed
    }
    check_launch_limits(p, s);  // (before the kernel is compiled or loaded)
    Kernel k = load_kernel(s);
    launch(k, p, stream);
  });
}

flashgen_status flashgen_merge_problem_init(flashgen_merge_problem* problem, flashgen_state_dtype partial_dtype,
                                            flashgen_state_dtype out_dtype, int64_t num_states, int64_t batch,
                                            int64_t seqlen_q, int64_t heads, int64_t head_dim_v,
                                            const void* o_partial, const float* lse_partial, void* o, float* lse) {
  const char* fn = "flashgen_merge_problem_init";
  return guarded(fn, [&] {
    require_non_null(problem, fn, "problem");
    const StateDType pd = to_state_dtype(static_cast<int>(partial_dtype), fn, "partial_dtype");
    const StateDType od = to_state_dtype(static_cast<int>(out_dtype), fn, "out_dtype");
    const struct {
      const char* name;
      int64_t value;
    } sizes[] = {{"num_states", num_states}, {"batch", batch},   {"seqlen_q", seqlen_q},
                 {"heads", heads},           {"head_dim_v", head_dim_v}};
    for (const auto& s : sizes)
      if (s.value < 0)
        throw InvalidArgument(fmt::format("{}: {} = {} is negative; sizes must be >= 0", fn, s.name, s.value));
    const MergeProblem p =
        make_merge_problem(pd, od, num_states, batch, seqlen_q, heads, head_dim_v, o_partial, lse_partial, o, lse);
    flashgen_merge_problem c;
    std::memset(&c, 0, sizeof c);
    c.partial_dtype = partial_dtype;
    c.out_dtype = out_dtype;
    c.num_states = p.num_states;
    c.batch = p.batch;
    c.seqlen_q = p.seqlen_q;
    c.heads = p.heads;
    c.head_dim_v = p.head_dim_v;
    c.o_partial.data = p.o_partial.data;
    c.o_partial.stride_state = p.o_partial.stride_state;
    c.o_partial.stride_batch = p.o_partial.stride_batch;
    c.o_partial.stride_seq = p.o_partial.stride_seq;
    c.o_partial.stride_head = p.o_partial.stride_head;
    c.lse_partial.data = p.lse_partial.data;
    c.lse_partial.stride_state = p.lse_partial.stride_state;
    c.lse_partial.stride_batch = p.lse_partial.stride_batch;
    c.lse_partial.stride_head = p.lse_partial.stride_head;
    c.lse_partial.stride_seq = p.lse_partial.stride_seq;
    c.o = from_tensor(p.o);
    c.lse.data = p.lse.data;
    c.lse.stride_batch = p.lse.stride_batch;
    c.lse.stride_head = p.lse.stride_head;
    *problem = c;
  });
}

flashgen_status flashgen_plan_merge(const flashgen_merge_problem* problem, int arch, char* spec_out,
                                    size_t spec_out_len) {
  const char* fn = "flashgen_plan_merge";
  return guarded(fn, [&] {
    const MergeProblem p = to_merge_problem(problem, fn);
    require_non_null(spec_out, fn, "spec_out");
    check_arch_arg(arch, fn);
    KernelSpec spec;
    if (arch != 0)
      spec = plan(p, arch);
    else
      current_gpu({"arch"}, [&] { spec = plan(p); });
    write_spec(spec, spec_out, spec_out_len, fn);
  });
}

flashgen_status flashgen_merge_states(const flashgen_merge_problem* problem, flashgen_stream stream) {
  const char* fn = "flashgen_merge_states";
  return guarded(fn, [&] {
    const MergeProblem p = to_merge_problem(problem, fn);
    merge_states(p, stream);
  });
}

flashgen_status flashgen_launch_merge_spec(const char* spec, const flashgen_merge_problem* problem,
                                           flashgen_stream stream) {
  const char* fn = "flashgen_launch_merge_spec";
  return guarded(fn, [&] {
    const KernelSpec s = parse_spec(spec, fn);
    const MergeProblem p = to_merge_problem(problem, fn);
    check_merge_problem(p);
    rt::check_merge_matches_spec(p, s);
    if (p.batch == 0 || p.seqlen_q == 0 || p.heads == 0) {
      require_valid(s, profile_for_arch(s.arch));
      return;  // empty merge: nothing to launch, no GPU needed
    }
    Kernel k = load_kernel(s);
    launch(k, p, stream);
  });
}

}  // extern "C"
