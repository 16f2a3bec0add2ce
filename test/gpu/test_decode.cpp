// GPU tier: split-KV decode (decode.hpp) against the float64 reference, on
// every matrix unit's profile (the hopper profile's decode runs its m16n8k16
// unit; m8n8k4 takes the f16 cases). Each case runs decode() instead of forward() and is
// checked like a forward case: poisoned O and LSE fully overwritten, guard
// bands untouched, inputs unchanged, every row against the reference. Split
// counts from 1 to more than there are key tiles (empty splits), key counts
// that are not multiples of anything, GQA packing 1..16, causal decode with
// 2-16 query rows in both alignments (16 and 32 packed rows: key-split warps;
// 64: one warp per 16 rows; rows that see no key included), bias,
// LSE, the caller's NaN-poisoned workspace and the library's.
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "test/gpu/gpu_run.hpp"

using namespace fgtest;
using flashgen::BiasKind;
using flashgen::DType;
using flashgen::MaskKind;

namespace {

Case decode_case(DType dt, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, int64_t d, int splits,
                 bool caller_ws) {
  Case c = base("decode");
  c.dtype = dt;
  c.batch = b;
  c.heads_q = hq;
  c.heads_kv = hkv;
  c.seqlen_q = sq;
  c.seqlen_k = sk;
  c.head_dim = c.head_dim_v = d;
  c.decode_splits = splits;
  c.decode_caller_workspace = caller_ws;
  c.sample_rows = 0;
  return c;
}

std::vector<Case> shape_cases() {
  std::vector<Case> v;
  int k = 0;
  // One query row, GQA groups of 1..16, key counts around the tile sizes.
  struct S {
    int64_t hq, hkv, sk, d;
  };
  for (const S& s : {S{32, 8, 4097, 128}, S{8, 8, 1, 64}, S{16, 1, 65, 64}, S{64, 8, 1000, 128}, S{12, 4, 63, 96},
                     S{4, 2, 3001, 256}, S{32, 8, 129, 80}}) {
    for (int splits : {0, 1, 3, 64}) {
      const DType dt = k % 2 == 0 ? DType::bf16 : DType::f16;
      v.push_back(decode_case(dt, 1 + k % 3, s.hq, s.hkv, 1, s.sk, s.d, splits, k % 2 == 1));
      ++k;
    }
  }
  // head_dim_v != head_dim, LSE off.
  Case c = decode_case(DType::f16, 2, 8, 2, 1, 777, 128, 5, true);
  c.head_dim_v = 64;
  c.lse = false;
  v.push_back(c);
  return v;
}

std::vector<Case> causal_cases() {
  std::vector<Case> v;
  int k = 0;
  for (MaskKind m : {MaskKind::causal_bottom_right, MaskKind::causal_top_left}) {
    for (int64_t sq : {2, 4, 8, 16}) {
      for (int64_t sk : {int64_t{1}, sq, int64_t{300}, int64_t{2049}}) {
        Case c = decode_case(k % 2 == 0 ? DType::bf16 : DType::f16, 2, 32, 8, sq, sk, 128, k % 3 == 0 ? 0 : 1 + k % 5,
                             k % 2 == 0);
        c.mask = m;
        v.push_back(c);
        ++k;
      }
    }
  }
  return v;
}

std::vector<Case> bias_cases() {
  std::vector<Case> v;
  for (BiasKind bk : {BiasKind::input, BiasKind::f32}) {
    for (int splits : {0, 4}) {
      Case c = decode_case(DType::bf16, 2, 16, 4, 3, 513, 64, splits, splits == 4);
      c.bias = bk;
      c.bias_neg_inf = true;
      c.mask = MaskKind::causal_bottom_right;
      v.push_back(c);
    }
  }
  return v;
}

// Softcap through the split kernel (with and without key-split warps: one
// query row packs 4 heads into a 16-row tile) and the combine; logits around
// 1e3 that the cap of 20 saturates.
std::vector<Case> softcap_cases() {
  std::vector<Case> v;
  int k = 0;
  for (int64_t sq : {1, 5}) {
    for (int splits : {0, 1, 3}) {
      Case c = decode_case(k % 2 == 0 ? DType::bf16 : DType::f16, 2, 16, 4, sq, 777, 128, splits, splits == 3);
      c.softcap = 20.0f;
      c.logits = Logits::qk;
      c.magnitude = 1e3;
      c.mask = sq > 1 ? MaskKind::causal_bottom_right : MaskKind::none;
      v.push_back(c);
      ++k;
    }
  }
  return v;
}

// Windows, sinks and ALiBi through the split kernel (key-split warps with one
// query row of 4 packed heads; several splits over a window's tiles only) and
// the combine (each sink counted once).
std::vector<Case> modifier_cases() {
  std::vector<Case> v;
  int k = 0;
  for (int64_t sq : {1, 5}) {
    for (int splits : {0, 1, 3}) {
      Case c = decode_case(k % 2 == 0 ? DType::bf16 : DType::f16, 2, 16, 4, sq, 3001, k % 3 == 2 ? 64 : 128, splits,
                           splits == 3);
      c.mask = k % 2 == 0 ? MaskKind::window_bottom_right : MaskKind::window_top_left;
      c.window_left = k % 3 == 0 ? 700 : 2000;
      c.window_right = k % 2 == 0 ? 0 : 100;
      c.sinks = k % 2 == 0 || splits == 3;
      c.alibi = k % 3 != 1;
      c.alibi_per_batch = k % 2 == 1;
      v.push_back(c);
      ++k;
    }
  }
  // A NaN V value under a window, several splits.
  Case c = decode_case(DType::f16, 2, 8, 2, 4, 300, 64, 3, true);
  c.mask = MaskKind::window_bottom_right;
  c.window_left = 20;
  c.window_right = 0;
  c.poison = Poison::v_many;
  c.poison_value = std::numeric_limits<float>::quiet_NaN();
  v.push_back(c);
  return v;
}

std::vector<Case> poison_cases() {
  std::vector<Case> v;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Case c = decode_case(DType::f16, 2, 8, 2, 4, 300, 64, 3, true);
    c.mask = MaskKind::causal_bottom_right;
    c.poison = Poison::v_many;
    c.poison_value = bad;
    v.push_back(c);
  }
  return v;
}

// Threads decoding at once with the library's workspace, on one shared stream
// or each on CU_STREAM_PER_THREAD (one handle, a stream per thread): a call's
// split and combine must not interleave with another call's on the same
// buffer, or a combine merges another problem's partials. Each thread decodes
// its own problem (sizes differ, so the shared buffer also grows) several
// times; every output is then checked against its float64 reference.
void run_concurrent(bool per_thread_stream) {
  constexpr int kThreads = 4, kIters = 6;
  std::vector<HostCase> hcs;
  std::vector<std::unique_ptr<DeviceCase>> dcs;
  for (int t = 0; t < kThreads; ++t) {
    Case c = decode_case(t % 2 == 0 ? DType::bf16 : DType::f16, 1 + t % 2, 32, 8, 1, 2049 + 1024 * t, 128, 0, false);
    hcs.push_back(make_host_case(c));
    dcs.push_back(std::make_unique<DeviceCase>(hcs.back()));
    dcs.back()->poison();
  }
  Stream shared;
  std::vector<std::string> thread_error(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int it = 0; it < kIters; ++it)
          (void)flashgen::decode(dcs[t]->problem, per_thread_stream ? CU_STREAM_PER_THREAD : shared.get());
        if (per_thread_stream) rt::check(drv().cuStreamSynchronize(CU_STREAM_PER_THREAD), "cuStreamSynchronize");
      } catch (const std::exception& e) {
        thread_error[t] = e.what();
      }
    });
  for (std::thread& th : threads) th.join();
  shared.sync();
  rt::check(drv().cuCtxSynchronize(), "cuCtxSynchronize");
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(thread_error[t] == "");
    const RefRows rr = reference(hcs[t]);
    CaseResult res;
    const std::vector<uint16_t> o_dev = dcs[t]->o.download<uint16_t>();
    const std::vector<float> lse_dev = dcs[t]->lse.download<float>();
    check_o_poison(hcs[t], rr, o_dev, res);
    check_values(hcs[t], rr, o_dev, lse_dev, res);
    std::string why;
    for (const std::string& e : res.errors) why += "\n  " + e;
    INFO(hcs[t].c.str(), why);
    CHECK(res.ok);
    CHECK(res.rows_checked > 0);
  }
  std::printf("== decode concurrent (%s): %d threads x %d calls, library workspace\n",
              per_thread_stream ? "CU_STREAM_PER_THREAD" : "one stream", kThreads, kIters);
}

}  // namespace

TEST_SUITE("gpu") {

FLASHGEN_GPU_TEST("decode: threads on one stream and on CU_STREAM_PER_THREAD share the library's workspace safely") {
  run_concurrent(false);
  run_concurrent(true);
}


FLASHGEN_GPU_TEST("decode: one query row, GQA packing, split counts 1..more than the key tiles") {
  run_group("decode shapes", shape_cases());
}

FLASHGEN_GPU_TEST("decode: causal with 2-16 query rows, both alignments") { run_group("decode causal", causal_cases()); }

FLASHGEN_GPU_TEST("decode: bias with -inf entries") { run_group("decode bias", bias_cases()); }

FLASHGEN_GPU_TEST("decode: softcap, logits far past the cap") { run_group("decode softcap", softcap_cases()); }

FLASHGEN_GPU_TEST("decode: sliding windows, sinks and ALiBi") { run_group("decode modifiers", modifier_cases()); }

FLASHGEN_GPU_TEST("decode: a NaN or +inf in V changes only the rows that read it") {
  run_group("decode poison", poison_cases());
}

}  // TEST_SUITE
