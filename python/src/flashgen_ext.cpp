// flashgen._flashgen: the Python package's native module (nanobind).
//
// A thin layer over the C++ API (include/flashgen/flashgen.hpp). The Python
// side (python/flashgen/*.py) reads shapes, strides and pointers off the
// tensors and passes one attention problem as a flat list of int64 in the
// order of the Problem* constants below (kept in step with
// python/flashgen/_layout.py, which lists the same names and positions), so a
// call costs one argument conversion and no Python object per field.
//
// Errors: the library's exceptions become the Python classes registered here
// (InvalidArgument is a ValueError, Unsupported a NotImplementedError,
// CompileError / DriverError / Unavailable RuntimeErrors, CacheIOError an
// OSError), carrying the library's message unchanged.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/driver.hpp"  // rt::ensure_context
#include "runtime/tune_internal.hpp"  // rt::plan_for_device
#include "tools/flashgen_cli.hpp"

namespace nb = nanobind;
using namespace flashgen;

namespace {

// Positions in the flat problem list (python/flashgen/_layout.py: PROBLEM_FIELDS).
enum ProblemField : int {
  kDtype, kBatch, kSeqlenQ, kSeqlenK, kHeadsQ, kHeadsKv, kHeadDim, kHeadDimV, kMask,
  kQ, kQStrideBatch, kQStrideSeq, kQStrideHead,
  kK, kKStrideBatch, kKStrideSeq, kKStrideHead,
  kV, kVStrideBatch, kVStrideSeq, kVStrideHead,
  kO, kOStrideBatch, kOStrideSeq, kOStrideHead,
  kBiasKind, kBias, kBiasStrideBatch, kBiasStrideHead, kBiasStrideQ, kBiasStrideK,
  kLse, kLseStrideBatch, kLseStrideHead,
  kWindowLeft, kWindowRight,
  kSinks, kAlibi, kAlibiStrideBatch,
  kCuSeqlensQ, kCuSeqlensK, kSequsedK, kTotalQ, kTotalK,
  kPageTable, kPageTableStride, kPageSize, kNumPages,
  kProblemFields
};

// Positions in the flat merge list (python/flashgen/_layout.py: MERGE_FIELDS).
enum MergeField : int {
  mPartialDtype, mOutDtype, mNumStates, mBatch, mSeqlenQ, mHeads, mHeadDimV,
  mOPartial, mOPartialStrideState, mOPartialStrideBatch, mOPartialStrideSeq, mOPartialStrideHead,
  mLsePartial, mLsePartialStrideState, mLsePartialStrideBatch, mLsePartialStrideHead, mLsePartialStrideSeq,
  mO, mOStrideBatch, mOStrideSeq, mOStrideHead,
  mLse, mLseStrideBatch, mLseStrideHead,
  kMergeFields
};

template <class T>
T* ptr(int64_t v) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(v));
}

// An enum code from Python, refused with the argument's name when out of range
// (the Python layer passes only valid codes; this guards the native module's
// own callers).
template <class E>
E enum_code(int64_t v, int64_t count, const char* what) {
  if (v < 0 || v >= count)
    throw InvalidArgument(std::string(what) + " code " + std::to_string(v) + " is out of range [0, " +
                          std::to_string(count) + ")");
  return static_cast<E>(v);
}

AttentionProblem to_problem(const std::vector<int64_t>& f, std::optional<double> scale, double softcap) {
  if (f.size() != kProblemFields)
    throw InvalidArgument("problem list has " + std::to_string(f.size()) + " fields; expected " +
                          std::to_string(int{kProblemFields}));
  AttentionProblem p;
  p.dtype = enum_code<DType>(f[kDtype], 2, "dtype");
  p.batch = f[kBatch];
  p.seqlen_q = f[kSeqlenQ];
  p.seqlen_k = f[kSeqlenK];
  p.heads_q = f[kHeadsQ];
  p.heads_kv = f[kHeadsKv];
  p.head_dim = f[kHeadDim];
  p.head_dim_v = f[kHeadDimV];
  p.mask = enum_code<MaskKind>(f[kMask], 5, "mask");
  if (scale) p.softmax_scale = static_cast<float>(*scale);
  auto tensor = [&](int at) {
    return TensorRef{ptr<const void>(f[at]), f[at + 1], f[at + 2], f[at + 3]};
  };
  p.q = tensor(kQ);
  p.k = tensor(kK);
  p.v = tensor(kV);
  p.o = tensor(kO);
  p.bias.kind = enum_code<BiasKind>(f[kBiasKind], 3, "bias kind");
  p.bias.data = ptr<const void>(f[kBias]);
  p.bias.stride_batch = f[kBiasStrideBatch];
  p.bias.stride_head = f[kBiasStrideHead];
  p.bias.stride_q = f[kBiasStrideQ];
  p.bias.stride_k = f[kBiasStrideK];
  p.lse.data = ptr<float>(f[kLse]);
  p.lse.stride_batch = f[kLseStrideBatch];
  p.lse.stride_head = f[kLseStrideHead];
  p.softcap = static_cast<float>(softcap);
  p.window_left = f[kWindowLeft];
  p.window_right = f[kWindowRight];
  p.sinks = ptr<const float>(f[kSinks]);
  p.alibi_slopes = ptr<const float>(f[kAlibi]);
  p.alibi_stride_batch = f[kAlibiStrideBatch];
  p.cu_seqlens_q = ptr<const int32_t>(f[kCuSeqlensQ]);
  p.cu_seqlens_k = ptr<const int32_t>(f[kCuSeqlensK]);
  p.seqused_k = ptr<const int32_t>(f[kSequsedK]);
  p.total_q = f[kTotalQ];
  p.total_k = f[kTotalK];
  p.page_table = ptr<const int32_t>(f[kPageTable]);
  p.page_table_stride = f[kPageTableStride];
  p.page_size = f[kPageSize];
  p.num_pages = f[kNumPages];
  return p;
}

MergeProblem to_merge(const std::vector<int64_t>& f) {
  if (f.size() != kMergeFields)
    throw InvalidArgument("merge list has " + std::to_string(f.size()) + " fields; expected " +
                          std::to_string(int{kMergeFields}));
  MergeProblem m;
  m.partial_dtype = enum_code<StateDType>(f[mPartialDtype], 3, "partial dtype");
  m.out_dtype = enum_code<StateDType>(f[mOutDtype], 3, "out dtype");
  m.num_states = f[mNumStates];
  m.batch = f[mBatch];
  m.seqlen_q = f[mSeqlenQ];
  m.heads = f[mHeads];
  m.head_dim_v = f[mHeadDimV];
  m.o_partial = StatesRef{ptr<const void>(f[mOPartial]), f[mOPartialStrideState], f[mOPartialStrideBatch],
                          f[mOPartialStrideSeq], f[mOPartialStrideHead]};
  m.lse_partial = StatesLseRef{ptr<const float>(f[mLsePartial]), f[mLsePartialStrideState],
                               f[mLsePartialStrideBatch], f[mLsePartialStrideHead], f[mLsePartialStrideSeq]};
  m.o = TensorRef{ptr<const void>(f[mO]), f[mOStrideBatch], f[mOStrideSeq], f[mOStrideHead]};
  m.lse.data = ptr<float>(f[mLse]);
  m.lse.stride_batch = f[mLseStrideBatch];
  m.lse.stride_head = f[mLseStrideHead];
  return m;
}

CUstream stream_of(uintptr_t s) { return reinterpret_cast<CUstream>(s); }

// One attention call on the current device. num_splits: -1 lets the library
// choose between the forward kernel and the split-KV decode (forward()'s
// rule, decode_preferred); 0 runs the decode with splits chosen from the SM
// count; 1..128 the decode with that many. A decode needs a workspace: when
// (workspace, workspace_bytes) is smaller than the plan's, nothing is launched
// and the bytes needed are returned, so the caller allocates through its own
// allocator (stream-ordered, CUDA-graph safe) and calls again. Returns 0 when
// the call was enqueued (or there was nothing to do).
int64_t run_attention(const std::vector<int64_t>& fields, std::optional<double> scale, double softcap, uintptr_t stream,
                      int num_splits, uintptr_t workspace, int64_t workspace_bytes) {
  const AttentionProblem p = to_problem(fields, scale, softcap);
  if (num_splits < -1 || num_splits > kMaxDecodeSplits)
    throw InvalidArgument("num_splits (" + std::to_string(num_splits) + ") must be None, 0 (chosen) or in [1, " +
                          std::to_string(kMaxDecodeSplits) + "]");
  nb::gil_scoped_release release;  // a first call compiles (NVRTC, seconds); other threads go on
  check_problem(p);
  if (p.empty()) return 0;
  const DeviceInfo dev = current_device();
  const bool as_decode = num_splits >= 0 || decode_preferred(p, dev.arch, dev.sm_count);
  if (!as_decode) {
    Kernel k = load_kernel(plan(p));  // (the current device, as forward(): its cached name for tune entries)
    launch(k, p, stream_of(stream));
    return 0;
  }
  const DecodePlan dp = plan_decode(p, dev.arch, dev.sm_count, num_splits < 0 ? 0 : num_splits);
  if (dp.workspace_bytes > 0 && (workspace == 0 || workspace_bytes < dp.workspace_bytes)) return dp.workspace_bytes;
  DecodeOptions o;
  o.plan = &dp;
  o.workspace = dp.workspace_bytes > 0 ? reinterpret_cast<void*>(workspace) : nullptr;
  o.workspace_bytes = dp.workspace_bytes > 0 ? workspace_bytes : 0;
  decode(p, stream_of(stream), o);
  return 0;
}

// One call signature, prepared once (python/flashgen/_core.py memoizes one per
// signature: shapes, strides, dtypes, device, masks, modifiers; every pointer
// but q, k, v, o and LSE's fixed). run() fills the five pointers, checks the
// problem (alignment, nulls, overlaps: the library's check_problem) and
// launches the forward kernel planned for the signature. The plan (with the
// tune files' tile, and the forward-vs-decode choice) is remade when the
// current context changes and at most every kReplanSeconds otherwise, so a
// changed tune file applies to prepared signatures within that time; the
// kernel stays loaded (load_kernel's module cache). Decode signatures are not
// prepared: prepare() answers None for them and the general path runs.
class PreparedCall {
 public:
  static constexpr double kReplanSeconds = 1.0;

  PreparedCall(const std::vector<int64_t>& fields, std::optional<double> scale, double softcap)
      : base_(to_problem(fields, scale, softcap)) {
    check_problem(base_);
  }

  // Plans for the current device; false when the library would run this
  // signature as a split-KV decode (or there is nothing to run).
  bool plan_now() {
    const DeviceInfo dev = current_device();
    if (base_.empty() || decode_preferred(base_, dev.arch, dev.sm_count)) return false;
    Kernel k = load_kernel(plan(base_));
    std::lock_guard<std::mutex> lock(mu_);
    kernel_ = k;
    planned_at_ = std::chrono::steady_clock::now();
    return true;
  }

  // q, k, v, o, lse: device addresses (lse 0 exactly when the signature has no LSE).
  // Launches and returns true; false when the library would now run the signature as
  // a split-KV decode (a replan on another device), and nothing was launched: the
  // caller takes the general path (its decode workspace comes from the caller's
  // allocator, never the library's, so CUDA-graph capture stays legal).
  bool run(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t stream) {
    AttentionProblem p = base_;
    p.q.data = reinterpret_cast<const void*>(q);
    p.k.data = reinterpret_cast<const void*>(k);
    p.v.data = reinterpret_cast<const void*>(v);
    p.o.data = reinterpret_cast<const void*>(o);
    if ((lse != 0) != (base_.lse.data != nullptr))
      throw InvalidArgument("prepared call: lse is " + std::string(lse != 0 ? "set" : "null") +
                            " but the signature was prepared " + (base_.lse.data != nullptr ? "with" : "without") +
                            " an LSE output");
    if (lse != 0) p.lse.data = reinterpret_cast<float*>(lse);
    nb::gil_scoped_release release;
    Kernel kern;
    bool fresh;
    {
      std::lock_guard<std::mutex> lock(mu_);
      kern = kernel_;
      fresh = std::chrono::duration<double>(std::chrono::steady_clock::now() - planned_at_).count() < kReplanSeconds;
    }
    // (a kernel is loaded into one context: another current context, e.g. another device, replans)
    if (!fresh || kern.function == nullptr || rt::ensure_context() != kern.context) {
      if (!plan_now()) return false;
      std::lock_guard<std::mutex> lock(mu_);
      kern = kernel_;
    }
    launch(kern, p, stream_of(stream));  // (checks the problem and that it matches the kernel)
    return true;
  }

  std::string spec() {
    std::lock_guard<std::mutex> lock(mu_);
    return kernel_.function != nullptr ? kernel_.spec.canonical() : std::string();
  }

 private:
  AttentionProblem base_;
  std::mutex mu_;
  Kernel kernel_;  // (its context: the one it was loaded into)
  std::chrono::steady_clock::time_point planned_at_{};
};

std::string spec_repr(const KernelSpec& s) { return "KernelSpec('" + s.canonical() + "')"; }

// A DLPack dtype as numpy and PyTorch spell it ("float64", "int16", "bfloat16", "bool"; "float32x4"
// with lanes), or "DLPack dtype code C, B bits" for a code without such a name.
std::string dlpack_dtype_name(const nb::dlpack::dtype& t) {
  using Code = nb::dlpack::dtype_code;
  std::string name;
  switch (static_cast<Code>(t.code)) {
    case Code::Int: name = "int" + std::to_string(t.bits); break;
    case Code::UInt: name = "uint" + std::to_string(t.bits); break;
    case Code::Float: name = "float" + std::to_string(t.bits); break;
    case Code::Bfloat: name = "bfloat" + std::to_string(t.bits); break;
    case Code::Complex: name = "complex" + std::to_string(t.bits); break;
    case Code::Bool: name = t.bits == 8 ? "bool" : "bool" + std::to_string(t.bits); break;
    default: name = "DLPack dtype code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits"; break;
  }
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

nb::dict compiled_dict(const CompiledKernel& c) {
  nb::dict d;
  d["spec"] = c.spec;
  d["name"] = c.name;
  d["key"] = c.key;
  d["cubin"] = nb::bytes(c.cubin.data(), c.cubin.size());
  d["from_cache"] = c.from_cache;
  d["cache_path"] = c.cache_path;
  d["compile_log"] = c.compile_log;
  return d;
}

}  // namespace

NB_MODULE(_flashgen, m) {
  m.doc() = "libflashgen's native module (internal; use the flashgen package)";

  // The library's exceptions: flashgen.Error, and under it one class per
  // ErrorCode that also derives from the standard Python exception a caller
  // would catch (ValueError for bad arguments, NotImplementedError for valid
  // but unsupported requests, RuntimeError for compile / driver failures,
  // OSError for the cache's file system).
  auto make = [&](const char* name, PyObject* bases) {
    PyObject* cls = PyErr_NewException((std::string("flashgen.") + name).c_str(), bases, nullptr);
    if (!cls) throw nb::python_error();
    m.attr(name) = nb::handle(cls);
    return cls;
  };
  static PyObject* error_cls = make("Error", PyExc_RuntimeError);
  auto pair = [](PyObject* a, PyObject* b) { return nb::make_tuple(nb::handle(a), nb::handle(b)).release().ptr(); };
  static PyObject* invalid_cls = make("InvalidArgument", pair(error_cls, PyExc_ValueError));
  static PyObject* unsupported_cls = make("Unsupported", pair(error_cls, PyExc_NotImplementedError));
  static PyObject* compile_cls = make("CompileError", error_cls);
  static PyObject* driver_cls = make("DriverError", error_cls);
  static PyObject* unavailable_cls = make("Unavailable", error_cls);
  static PyObject* io_cls = make("CacheIOError", pair(error_cls, PyExc_OSError));
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* cls = error_cls;
      switch (e.code()) {
        case ErrorCode::invalid_argument: cls = invalid_cls; break;
        case ErrorCode::unsupported: cls = unsupported_cls; break;
        case ErrorCode::compile_failed: cls = compile_cls; break;
        case ErrorCode::driver: cls = driver_cls; break;
        case ErrorCode::unavailable: cls = unavailable_cls; break;
        case ErrorCode::io: cls = io_cls; break;
        default: break;
      }
      // A message may quote bytes that are not UTF-8 (a corrupt profile's text, via yaml-cpp):
      // they arrive as \xNN escapes instead of turning the error into a UnicodeDecodeError.
      const std::string_view what = e.what();
      PyObject* msg = PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace");
      if (msg == nullptr) return;  // (the decode's own error is set)
      PyErr_SetObject(cls, msg);
      Py_DECREF(msg);
    }
  });

  m.attr("PROBLEM_FIELDS") = int{kProblemFields};
  m.attr("MERGE_FIELDS") = int{kMergeFields};
  m.attr("MAX_DECODE_SPLITS") = kMaxDecodeSplits;
  m.attr("MAX_PAGE_SIZE") = kMaxPageSize;
  m.attr("GENERATOR_VERSION") = kGeneratorVersion;

  nb::class_<KernelSpec>(m, "KernelSpec",
                         "One kernel's specialization (include/flashgen/spec.hpp); its canonical string names it.")
      .def_static("parse", &KernelSpec::parse, nb::arg("text"),
                  "Parse a canonical spec string ('flashgen.fwd.v1:sm=90,...'); ValueError when it is not one.")
      .def("canonical", &KernelSpec::canonical)
      .def("kernel_name", &KernelSpec::kernel_name)
      .def("smem_bytes", &KernelSpec::smem_bytes)
      .def("threads", &KernelSpec::threads)
      .def_prop_ro("family", [](const KernelSpec& s) { return std::string(to_string(s.family)); })
      .def_prop_ro("arch", [](const KernelSpec& s) { return s.arch; })
      .def_prop_ro("unit", [](const KernelSpec& s) { return std::string(to_string(s.unit)); })
      .def_prop_ro("dtype", [](const KernelSpec& s) { return std::string(to_string(s.dtype)); })
      .def_prop_ro("head_dim", [](const KernelSpec& s) { return s.head_dim; })
      .def_prop_ro("head_dim_v", [](const KernelSpec& s) { return s.head_dim_v; })
      .def_prop_ro("block_m", [](const KernelSpec& s) { return s.tile.block_m; })
      .def_prop_ro("block_n", [](const KernelSpec& s) { return s.tile.block_n; })
      .def_prop_ro("warps", [](const KernelSpec& s) { return s.tile.warps; })
      .def_prop_ro("stages", [](const KernelSpec& s) { return s.tile.stages; })
      .def_prop_ro("mask", [](const KernelSpec& s) { return std::string(to_string(s.mask)); })
      .def_prop_ro("bias", [](const KernelSpec& s) { return std::string(to_string(s.bias)); })
      .def_prop_ro("has_lse", [](const KernelSpec& s) { return s.has_lse; })
      .def_prop_ro("softcap", [](const KernelSpec& s) { return s.softcap; })
      .def_prop_ro("sinks", [](const KernelSpec& s) { return s.sinks; })
      .def_prop_ro("alibi", [](const KernelSpec& s) { return s.alibi; })
      .def_prop_ro("varlen", [](const KernelSpec& s) { return s.varlen; })
      .def_prop_ro("paged", [](const KernelSpec& s) { return s.paged; })
      .def_prop_ro("pack", [](const KernelSpec& s) { return s.pack; })
      .def("__str__", &KernelSpec::canonical)
      .def("__repr__", &spec_repr)
      .def("__eq__",
           [](const KernelSpec& a, nb::handle b) -> nb::object {
             if (!nb::isinstance<KernelSpec>(b)) return nb::borrow(Py_NotImplemented);  // spec == "text": False
             return nb::bool_(a == nb::cast<const KernelSpec&>(b));
           },
           nb::arg("other").none())
      .def("__ne__",
           [](const KernelSpec& a, nb::handle b) -> nb::object {
             if (!nb::isinstance<KernelSpec>(b)) return nb::borrow(Py_NotImplemented);
             return nb::bool_(!(a == nb::cast<const KernelSpec&>(b)));
           },
           nb::arg("other").none())
      .def("__hash__", [](const KernelSpec& s) { return nb::hash(nb::str(s.canonical().c_str())); });

  m.def("gpu_available", &gpu_available, "True when libcuda loads and a device is present; never raises.");
  m.def(
      "current_device",
      []() {
        const DeviceInfo d = current_device();
        nb::dict r;
        r["ordinal"] = d.ordinal;
        r["arch"] = d.arch;
        r["name"] = d.name;
        r["sm_count"] = d.sm_count;
        r["smem_per_block_optin"] = d.smem_per_block_optin;
        return r;
      },
      "The CUDA device current in this thread (its context, else device 0's primary context).");

  // An array of another framework through DLPack (its __dlpack__): pointer,
  // shape, strides in elements, dtype name, DLPack device type and id. Nothing
  // is copied; the caller keeps the array alive for the call.
  m.def(
      "dlpack_view",
      [](nb::ndarray<nb::ro> a) {  // (read-only exports too: nothing is written through this view)
        std::vector<int64_t> shape, stride;
        for (size_t i = 0; i < a.ndim(); ++i) {
          shape.push_back(static_cast<int64_t>(a.shape(i)));
          stride.push_back(static_cast<int64_t>(a.stride(i)));
        }
        const nb::dlpack::dtype t = a.dtype();
        std::string name = dlpack_dtype_name(t);  // (what a message shows of a dtype the calls do not take)
        if (t.lanes == 1) {
          if (t.code == uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 16) name = "f16";
          if (t.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && t.bits == 16) name = "bf16";
          if (t.code == uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 32) name = "f32";
          if (t.code == uint8_t(nb::dlpack::dtype_code::Int) && t.bits == 32) name = "i32";
          if (t.code == uint8_t(nb::dlpack::dtype_code::UInt) && t.bits == 8) name = "u8";
        }
        const auto data = static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.data()));
        return nb::make_tuple(data, shape, stride, name, a.device_type(), a.device_id());
      },
      nb::arg("array"));

  nb::class_<PreparedCall>(m, "PreparedCall")
      .def_prop_ro("spec", &PreparedCall::spec)
      .def("run", &PreparedCall::run, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"), nb::arg("lse"),
           nb::arg("stream"));
  // A PreparedCall for the signature of `fields` (pointers other than q, k, v, o and
  // LSE's taken as they are), or None when the library runs it as a split-KV decode
  // or there is nothing to launch. Loads (compiles) the kernel.
  m.def(
      "prepare",
      [](const std::vector<int64_t>& fields, std::optional<double> scale, double softcap) -> nb::object {
        auto call = std::make_unique<PreparedCall>(fields, scale, softcap);
        bool ok;
        {
          nb::gil_scoped_release release;
          ok = call->plan_now();
        }
        if (!ok) return nb::none();
        return nb::cast(call.release(), nb::rv_policy::take_ownership);
      },
      nb::arg("fields"), nb::arg("scale").none(), nb::arg("softcap"));

  m.def("attention", &run_attention, nb::arg("fields"), nb::arg("scale").none(), nb::arg("softcap"),
        nb::arg("stream"), nb::arg("num_splits"), nb::arg("workspace"), nb::arg("workspace_bytes"));

  m.def(
      "check_problem",
      [](const std::vector<int64_t>& fields, std::optional<double> scale, double softcap) {
        check_problem(to_problem(fields, scale, softcap));
      },
      nb::arg("fields"), nb::arg("scale").none(), nb::arg("softcap"));

  m.def(
      "plan_problem",
      [](const std::vector<int64_t>& fields, std::optional<double> scale, double softcap, int arch) {
        return plan(to_problem(fields, scale, softcap), arch);
      },
      nb::arg("fields"), nb::arg("scale").none(), nb::arg("softcap"), nb::arg("arch"));

  m.def(
      "merge",
      [](const std::vector<int64_t>& fields, uintptr_t stream) {
        const MergeProblem mp = to_merge(fields);
        nb::gil_scoped_release release;
        merge_states(mp, stream_of(stream));
      },
      nb::arg("fields"), nb::arg("stream"));
  m.def(
      "check_merge",
      [](const std::vector<int64_t>& fields) { check_merge_problem(to_merge(fields)); }, nb::arg("fields"));

  // ---- ahead of time: problems written as the CLI writes them ------------------
  // device: plan with the tune entries of that device name (flashgen pregen --device), instead of
  // those of the GPU of `arch` here (none without one).
  m.def(
      "plan_text",
      [](const std::string& text, int arch, const std::optional<std::string>& device) {
        const cli::ProblemDesc d = cli::parse_problem_text(text);
        return device ? rt::plan_for_device(cli::to_problem(d), arch, *device) : plan(cli::to_problem(d), arch);
      },
      nb::arg("problem"), nb::arg("arch"), nb::arg("device").none() = nb::none());
  // The profile plan() uses for `arch` (FLASHGEN_PROFILE's when set): raises what plan() would for a
  // broken or mismatched one (explain() maps the CLI's configuration errors through it).
  m.def("check_profile", [](int arch) { (void)profile_for_arch(arch); }, nb::arg("arch"));
  m.def(
      "plan_decode_text",
      [](const std::string& text, int arch, int sm_count, int num_splits) {
        const cli::ProblemDesc d = cli::parse_problem_text(text);
        const DecodePlan dp = plan_decode(cli::to_problem(d), arch, sm_count, num_splits);
        nb::dict r;
        r["split"] = dp.split;
        r["combine"] = dp.combine;
        r["num_splits"] = dp.num_splits;
        r["workspace_bytes"] = dp.workspace_bytes;
        return r;
      },
      nb::arg("problem"), nb::arg("arch"), nb::arg("sm_count"), nb::arg("num_splits"));
  // The directory pregen() compiles into (created when it does not exist yet); CacheIOError
  // "the user cache cannot receive kernels: ..." when kernels would be kept in memory only.
  m.def("pregen_cache_dir", [] { return cli::pregen_target_dir("the user cache"); });
  m.def("generate", &generate, nb::arg("spec"));
  m.def(
      "compile",
      [](const KernelSpec& s) {
        CompiledKernel c;
        {
          nb::gil_scoped_release release;
          c = compile(s);
        }
        return compiled_dict(c);
      },
      nb::arg("spec"));
  m.def(
      "warmup",
      [](const std::vector<KernelSpec>& specs, int threads) {
        std::vector<WarmupResult> results;
        {
          nb::gil_scoped_release release;
          results = warmup(specs, threads);
        }
        nb::list out;
        for (const WarmupResult& r : results) {
          nb::dict d;
          d["spec"] = r.spec;
          d["ok"] = r.ok;
          d["from_cache"] = r.from_cache;
          d["cache_path"] = r.cache_path;
          d["compile_log"] = r.compile_log;
          d["seconds"] = r.seconds;
          d["error"] = r.error;
          out.append(d);
        }
        return out;
      },
      nb::arg("specs"), nb::arg("threads"));
}
