// A CPU model of the m8n8k4 kernel's fragment mappings (templates/fwd_m8n8k4.cu):
// the PTX ISA quadpair semantics of mma.sync.aligned.m8n8k4.row.col, the k-slab
// shared-memory slots, the Q/K and V copies' item -> (row, slot) mappings, the
// lane roles (arow, bcol, rbase, cbase) and the lane^2 / lane^8 exchanges that
// turn S accumulators into P.V A fragments. The model computes a 16-row slice's
// S = Q.K^T and O = P.V with these mappings and compares them with plain loops;
// it also checks the bijections and the bank-conflict claims of the template.
// The formulas below are transcribed from the template: a change there must be
// mirrored here.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace {

// ---- the PTX ISA description (mma.m8n8k4, .f16 A/B, .f32 C/D) ----------------
struct LaneBits {
  int a0, a1, q0, q1, b;
};
LaneBits bits(int lane) { return {lane & 1, (lane >> 1) & 1, (lane >> 2) & 1, (lane >> 3) & 1, lane >> 4}; }
int quadpair(int lane) { return (lane >> 2) & 3; }              // lanes 0-3,16-19 -> 0; 4-7,20-23 -> 1; ...
int qp_thread(int lane) { return (lane & 3) + 4 * (lane >> 4); }  // t: row of A / column of B it holds

// Per quadpair: D[m][n] += sum_k A[m][k] B[k][n], A row m from thread m's a[k],
// B column n from thread n's b[k]; D element of register v of thread with
// (a0, a1, b): m = a0 + 2*v1 + 4*b, n = v0 + 2*a1 + 4*v2.
void mma884(const std::array<std::array<float, 4>, 32>& a, const std::array<std::array<float, 4>, 32>& b,
            std::array<std::array<float, 8>, 32>& d) {
  for (int lane = 0; lane < 32; ++lane) {
    const LaneBits x = bits(lane);
    for (int v = 0; v < 8; ++v) {
      const int m = x.a0 + 2 * ((v >> 1) & 1) + 4 * x.b;
      const int n = (v & 1) + 2 * x.a1 + 4 * (v >> 2);
      // the quadpair's thread m (A) and thread n (B)
      int lane_m = -1, lane_n = -1;
      for (int l = 0; l < 32; ++l) {
        if (quadpair(l) != quadpair(lane)) continue;
        if (qp_thread(l) == m) lane_m = l;
        if (qp_thread(l) == n) lane_n = l;
      }
      REQUIRE(lane_m >= 0);
      REQUIRE(lane_n >= 0);
      for (int k = 0; k < 4; ++k) d[lane][v] += a[lane_m][k] * b[lane_n][k];
    }
  }
}

// ---- the template's mappings ------------------------------------------------------
struct Roles {
  int a0, a1, qm, qn, hb, t, arow, bcol, rbase, cbase;
};
Roles roles(int lane) {
  Roles r{};
  r.a0 = lane & 1;
  r.a1 = (lane >> 1) & 1;
  r.qm = (lane >> 2) & 1;
  r.qn = (lane >> 3) & 1;
  r.hb = lane >> 4;
  r.t = r.a0 + 2 * r.a1 + 4 * r.hb;
  r.arow = 8 * r.qm + r.t;
  r.bcol = 8 * r.qn + r.t;
  r.rbase = 8 * r.qm + r.a0 + 4 * r.hb;
  r.cbase = 8 * r.qn + 2 * r.a1;
  return r;
}
// fg_slot<R>(ks, r)
int slot(int R, int ks, int r) { return ks * R + (R >= 16 ? (r ^ ((ks & 2) << 2)) : r); }

using Matrix = std::vector<std::vector<float>>;
Matrix random_matrix(int rows, int cols, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(-4, 4);  // small integers: every sum is exact in float
  Matrix m(rows, std::vector<float>(cols));
  for (auto& row : m)
    for (float& x : row) x = static_cast<float>(u(rng));
  return m;
}

// fg_load_kslab: item i -> (row, 16-byte unit); returns the k-slab array
// (slots * 4 elements) of a ROWS x W operand.
std::vector<float> load_kslab(const Matrix& src, int ROWS, int W, int threads, std::vector<int>* store_words) {
  const int UPR = W / 8, ITEMS = ROWS * UPR;
  std::vector<float> dst(static_cast<size_t>(ROWS) * W, -1e30f);
  std::set<int> written;
  for (int i = 0; i < (ITEMS + threads - 1) / threads * threads; ++i) {
    if (i >= ITEMS) continue;
    int row, unit;
    if (UPR >= 2) {
      const int pair = i >> 1;
      row = pair % ROWS;
      unit = 2 * (pair / ROWS) + (i & 1);
    } else {
      row = i;
      unit = 0;
    }
    for (int half = 0; half < 2; ++half) {
      const int s = slot(ROWS, 2 * unit + half, row);
      CHECK(written.insert(s).second);
      if (store_words) store_words->push_back(2 * s);  // per item i, first store's word address pushed first
      for (int e = 0; e < 4; ++e) dst[static_cast<size_t>(s) * 4 + e] = src[row][unit * 8 + half * 4 + e];
    }
  }
  CHECK(written.size() == static_cast<size_t>(ROWS * W / 4));
  return dst;
}

// fg_load_v: item i -> (kk, column pair); the transposed k-slab of BLOCK_N keys x W columns.
std::vector<float> load_v(const Matrix& v, int BLOCK_N, int W, std::vector<std::array<int, 2>>* store_words) {
  const int CP = W / 2, ITEMS = (BLOCK_N / 4) * CP;
  std::vector<float> dst(static_cast<size_t>(BLOCK_N) * W, -1e30f);
  std::set<int> written;
  for (int i = 0; i < ITEMS; ++i) {
    const int kk = i / CP, cp = i % CP;
    const bool odd_first = (i >> 3) & 1;
    const int first_col = 2 * cp + (odd_first ? 1 : 0), second_col = 2 * cp + (odd_first ? 0 : 1);
    for (int col : {first_col, second_col}) {
      const int s = slot(W, kk, col);
      CHECK(written.insert(s).second);
      for (int e = 0; e < 4; ++e) dst[static_cast<size_t>(s) * 4 + e] = v[4 * kk + e][col];
    }
    if (store_words) store_words->push_back({2 * slot(W, kk, first_col), 2 * slot(W, kk, second_col)});
  }
  CHECK(written.size() == static_cast<size_t>(BLOCK_N * W / 4));
  return dst;
}

// Distinct banks for a half warp's 8-byte accesses: the 16 word pairs (2w, 2w+1)
// cover 32 distinct banks, or the same address repeats (a broadcast).
bool half_warp_conflict_free(const std::vector<int>& words) {
  std::map<int, int> bank_to_word;
  for (int w : words) {
    for (int k = 0; k < 2; ++k) {
      const int bank = (w + k) % 32;
      auto [it, fresh] = bank_to_word.emplace(bank, w + k);
      if (!fresh && it->second != w + k) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("m8n8k4 model: lane roles are bijections onto the quadpair layout of the PTX ISA") {
  std::set<std::pair<int, int>> arows, bcols, accs;
  for (int lane = 0; lane < 32; ++lane) {
    const Roles r = roles(lane);
    // The template's quadpair / thread agree with the ISA's.
    CHECK(r.qm + 2 * r.qn == quadpair(lane));
    CHECK(r.t == qp_thread(lane));
    arows.insert({r.arow, r.qn});  // every A row fed once per quadpair column
    bcols.insert({r.bcol, r.qm});
    for (int v = 0; v < 8; ++v) {
      const int row = r.rbase + 2 * ((v >> 1) & 1), col = r.cbase + (v & 1) + 4 * (v >> 2);
      CHECK(accs.insert({row, col}).second);  // each of the 16x16 accumulators once
    }
  }
  CHECK(arows.size() == 32);
  CHECK(bcols.size() == 32);
  CHECK(accs.size() == 256);
}

TEST_CASE("m8n8k4 model: copies fill every slot once and shared accesses are conflict-free") {
  std::mt19937 rng(7);
  for (int rows : {16, 32, 64, 128})
    for (int w : {8, 16, 32, 64, 128}) {
      CAPTURE(rows);
      CAPTURE(w);
      const Matrix m = random_matrix(rows, w, rng);
      std::vector<int> words;
      const std::vector<float> slab = load_kslab(m, rows, w, 128, &words);
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < w; ++k) CHECK(slab[static_cast<size_t>(slot(rows, k / 4, r)) * 4 + k % 4] == m[r][k]);
      // Stores: words holds, per item, its two stores; a half warp = 16 items, store 0 then 1.
      for (size_t h = 0; h + 32 <= words.size(); h += 32) {
        std::vector<int> first, second;
        for (int k = 0; k < 16; ++k) {
          first.push_back(words[h + 2 * k]);
          second.push_back(words[h + 2 * k + 1]);
        }
        CHECK(half_warp_conflict_free(first));
        CHECK(half_warp_conflict_free(second));
      }
      // Reads of a k step: rows 16*j + arow (A) / 16*j + bcol (B) for the 32 lanes.
      for (int ks = 0; ks < w / 4; ++ks)
        for (int base = 0; base < rows; base += 16)
          for (int half = 0; half < 2; ++half) {
            std::vector<int> a, b;
            for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
              a.push_back(2 * slot(rows, ks, base + roles(lane).arow));
              b.push_back(2 * slot(rows, ks, base + roles(lane).bcol));
            }
            CHECK(half_warp_conflict_free(a));
            CHECK(half_warp_conflict_free(b));
          }
    }
  for (int bn : {16, 32, 64})
    for (int w : {8, 16, 32, 64, 128}) {
      CAPTURE(bn);
      CAPTURE(w);
      const Matrix v = random_matrix(bn, w, rng);
      std::vector<std::array<int, 2>> words;
      const std::vector<float> slab = load_v(v, bn, w, &words);
      for (int key = 0; key < bn; ++key)
        for (int c = 0; c < w; ++c) CHECK(slab[static_cast<size_t>(slot(w, key / 4, c)) * 4 + key % 4] == v[key][c]);
      for (size_t h = 0; h + 16 <= words.size(); h += 16) {
        std::vector<int> first, second;
        for (size_t k = h; k < h + 16; ++k) {
          first.push_back(words[k][0]);
          second.push_back(words[k][1]);
        }
        CHECK(half_warp_conflict_free(first));
        CHECK(half_warp_conflict_free(second));
      }
    }
}

TEST_CASE("m8n8k4 model: S = Q.K^T and O = P.V of one 16-row slice through the kernel's fragments") {
  std::mt19937 rng(11);
  for (int D : {8, 16, 32})
    for (int BN : {16, 32, 64})
      for (int DV : {8, 16, 48}) {
        CAPTURE(D);
        CAPTURE(BN);
        CAPTURE(DV);
        const int BM = 16;  // one slice
        const Matrix q = random_matrix(BM, D, rng), k = random_matrix(BN, D, rng), v = random_matrix(BN, DV, rng);
        const std::vector<float> sq = load_kslab(q, BM, D, 128, nullptr);
        const std::vector<float> sk = load_kslab(k, BN, D, 128, nullptr);
        // V by chunks (as the emitter splits DV: 48 = 32 + 16, 8 = 8).
        std::vector<int> chunks;
        for (int bit = 256; bit >= 8; bit /= 2)
          if (DV & bit) chunks.push_back(bit);

        // ---- S (fg_qk) ----
        std::vector<std::array<std::array<float, 8>, 32>> s(static_cast<size_t>(BN / 16));
        for (auto& t : s)
          for (auto& l : t) l.fill(0.f);
        for (int ks = 0; ks < D / 4; ++ks)
          for (int nt = 0; nt < BN / 16; ++nt) {
            std::array<std::array<float, 4>, 32> a{}, b{};
            for (int lane = 0; lane < 32; ++lane) {
              const Roles r = roles(lane);
              for (int e = 0; e < 4; ++e) {
                a[lane][e] = sq[static_cast<size_t>(slot(BM, ks, r.arow)) * 4 + e];
                b[lane][e] = sk[static_cast<size_t>(slot(BN, ks, nt * 16 + r.bcol)) * 4 + e];
              }
            }
            mma884(a, b, s[nt]);
          }
        Matrix s_ref(BM, std::vector<float>(BN, 0.f));
        for (int i = 0; i < BM; ++i)
          for (int j = 0; j < BN; ++j)
            for (int d = 0; d < D; ++d) s_ref[i][j] += q[i][d] * k[j][d];
        for (int nt = 0; nt < BN / 16; ++nt)
          for (int lane = 0; lane < 32; ++lane) {
            const Roles r = roles(lane);
            for (int e = 0; e < 8; ++e) {
              const int row = r.rbase + 2 * ((e >> 1) & 1), key = nt * 16 + r.cbase + (e & 1) + 4 * (e >> 2);
              CHECK(s[nt][lane][e] == s_ref[row][key]);
            }
          }

        // ---- P fragments (fg_make_p), P = S here (no softmax: the mapping is what is tested) ----
        // h[v1][v2] packs elements (v0 = 0, 1); a pair is modelled as two floats.
        std::vector<std::array<std::array<std::array<float, 2>, 2>, 32>> pf(static_cast<size_t>(BN / 4));
        for (int nt = 0; nt < BN / 16; ++nt) {
          std::array<std::array<std::array<std::array<float, 2>, 2>, 2>, 32> h{};  // [lane][v1][v2][v0]
          for (int lane = 0; lane < 32; ++lane)
            for (int v1 = 0; v1 < 2; ++v1)
              for (int v2 = 0; v2 < 2; ++v2)
                for (int v0 = 0; v0 < 2; ++v0) h[lane][v1][v2][v0] = s[nt][lane][2 * v1 + 4 * v2 + v0];
          std::array<std::array<std::array<std::array<float, 2>, 2>, 2>, 32> f{};  // [lane][v2][half][2]
          for (int lane = 0; lane < 32; ++lane) {
            const Roles r = roles(lane);
            for (int v2 = 0; v2 < 2; ++v2) {
              const auto mine = r.a1 ? h[lane][1][v2] : h[lane][0][v2];
              const int src = lane ^ 2;  // __shfl_xor_sync(.., 2): the value the partner offers
              const auto other = roles(src).a1 ? h[src][0][v2] : h[src][1][v2];
              f[lane][v2][0] = r.a1 ? other : mine;
              f[lane][v2][1] = r.a1 ? mine : other;
            }
          }
          for (int lane = 0; lane < 32; ++lane) {
            const Roles r = roles(lane);
            for (int kq = 0; kq < 4; ++kq)
              for (int x = 0; x < 2; ++x) {
                const auto& g = f[lane ^ 8][kq & 1][x];
                pf[static_cast<size_t>(4 * nt + kq)][lane][x] = (kq >> 1) == r.qn ? f[lane][kq & 1][x] : g;
              }
          }
        }
        // Every A fragment is row arow of P at keys 4kk .. 4kk+3.
        for (int kk = 0; kk < BN / 4; ++kk)
          for (int lane = 0; lane < 32; ++lane)
            for (int e = 0; e < 4; ++e) CHECK(pf[static_cast<size_t>(kk)][lane][e / 2][e % 2] == s_ref[roles(lane).arow][4 * kk + e]);

        // ---- O (fg_pv per chunk, fg_stage_o's column rule) ----
        Matrix o_ref(BM, std::vector<float>(DV, 0.f));
        for (int i = 0; i < BM; ++i)
          for (int c = 0; c < DV; ++c)
            for (int j = 0; j < BN; ++j) o_ref[i][c] += s_ref[i][j] * v[j][c];
        int off = 0;
        for (int w : chunks) {
          Matrix vc(BN, std::vector<float>(w));
          for (int j = 0; j < BN; ++j)
            for (int c = 0; c < w; ++c) vc[j][c] = v[j][off + c];
          const std::vector<float> sv = load_v(vc, BN, w, nullptr);
          const int dts = w >= 16 ? w / 16 : 1;
          for (int dt = 0; dt < dts; ++dt) {
            std::array<std::array<float, 8>, 32> o{};
            for (auto& l : o) l.fill(0.f);
            for (int kk = 0; kk < BN / 4; ++kk) {
              std::array<std::array<float, 4>, 32> a{}, b{};
              for (int lane = 0; lane < 32; ++lane) {
                const int col = w >= 16 ? roles(lane).bcol : (roles(lane).bcol & 7);
                for (int e = 0; e < 4; ++e) {
                  a[lane][e] = pf[static_cast<size_t>(kk)][lane][e / 2][e % 2];
                  b[lane][e] = sv[static_cast<size_t>(slot(w, kk, dt * 16 + col)) * 4 + e];
                }
              }
              mma884(a, b, o);
            }
            for (int lane = 0; lane < 32; ++lane) {
              const Roles r = roles(lane);
              for (int e = 0; e < 8; ++e) {
                const int row = r.rbase + 2 * ((e >> 1) & 1);
                const int col = dt * 16 + r.cbase + (e & 1) + 4 * (e >> 2);  // within the chunk
                if (col < w) CHECK(o[lane][e] == o_ref[row][off + col]);
              }
            }
          }
          off += w;
        }
      }
}
