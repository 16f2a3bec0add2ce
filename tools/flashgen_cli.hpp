// Shared pieces of the `flashgen` command-line tool (tools/flashgen*.cpp):
// problem descriptions (flags and YAML problem sets), the progress display,
// the cache a pregen writes into, the tile model (enumeration and ranking for
// `tune`, numbers for `explain`) and the ptxas report parser. Internal to the
// tool and its tests (and the Python package's native module).
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"

namespace flashgen::cli {

// ---- numbers -------------------------------------------------------------------
//
// Every number the tool reads (options, problem keys, YAML problem files, tile
// and head-dim lists) goes through these before it is used: no sscanf, no
// silent overflow, no NaN or infinity turned into an integer.

/// Largest batch, seqlen or head count a problem may name (the library's
/// checks then refuse tensors whose offsets overflow).
inline constexpr int64_t kMaxProblemSize = int64_t{1} << 40;
/// Largest head_dim / head_dim_v the tool passes on (the library's own rules,
/// which explain lists, then apply).
inline constexpr int64_t kMaxHeadDimArg = int64_t{1} << 20;

/// `text` as a decimal integer (an optional '-' and digits, nothing else: no
/// '+', spaces, leading zeros or "-0") when it is one in [lo, hi]; nullopt
/// otherwise (also on overflow).
std::optional<int64_t> int_in_range(const std::string& text, int64_t lo, int64_t hi);
/// How int_in_range wants an integer of [lo, ...] written, for messages: "in plain
/// decimal (no sign, leading zeros or spaces)" ("no '+', ..." when lo < 0).
std::string integer_form(int64_t lo);
/// `text` as a finite decimal number (no nan, inf, hex, sign '+', spaces or
/// trailing characters) when it is one in [lo, hi]; nullopt otherwise.
std::optional<double> real_in_range(const std::string& text, double lo, double hi);
/// int_in_range, or InvalidArgument "<what> has value '<text>': must be an
/// integer in [lo, hi] <integer_form(lo)>".
int64_t parse_int_arg(const std::string& what, const std::string& text, int64_t lo, int64_t hi);

// ---- problems ------------------------------------------------------------------

/// One attention problem as a user writes it (shapes only, no pointers).
struct ProblemDesc {
  std::string name;            ///< optional label ("" = none)
  DType dtype = DType::f16;
  int64_t batch = 1;
  int64_t seqlen_q = 1024;
  int64_t seqlen_k = 1024;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t head_dim = 64;
  int64_t head_dim_v = 64;
  MaskKind mask = MaskKind::none;
  BiasKind bias = BiasKind::none;
  bool lse = false;
  float softcap = 0.f;         ///< 0: off; else the cap (AttentionProblem::softcap)
  int64_t window_left = -1;    ///< mask windowtl / windowbr: keys left of the diagonal (-1: unbounded)
  int64_t window_right = -1;   ///< mask windowtl / windowbr: keys right of the diagonal (-1: unbounded)
  bool sinks = false;          ///< attention sinks on (AttentionProblem::sinks)
  bool alibi = false;          ///< ALiBi on (AttentionProblem::alibi_slopes)
  /// A packed (variable-length) batch when non-empty: the query rows and keys of each
  /// sequence (the same count, `batch`; seqlen_q / seqlen_k are then their maxima,
  /// max_seqlen_q / max_seqlen_k, and the sums total_q() / total_k() fit int32).
  std::vector<int64_t> seqlens_q, seqlens_k;
  bool seqused_k = false;      ///< packed batch or paged cache: a seqused_k array is passed (AttentionProblem::seqused_k)
  /// A paged KV cache when > 0: keys per page (a power of two in [1, 256]; AttentionProblem::page_size).
  /// K/V are pages of page_size keys reached through a page table; a packed batch
  /// then has no cu_seqlens_k (seqused_k counts each sequence's keys, seqlens_k).
  int64_t page_size = 0;

  bool varlen() const { return !seqlens_q.empty(); }
  bool paged() const { return page_size > 0; }
  int64_t total_q() const;     ///< sum of seqlens_q (0 for a dense batch)
  int64_t total_k() const;     ///< sum of seqlens_k (0 for a dense batch)
  /// Paged: ceil(seqlen_k / page_size), the page table's row length (0 when not paged).
  int64_t page_table_stride() const;
  /// Paged: the pages that hold the keys, batch * page_table_stride() (a packed batch: the
  /// sum of ceil(seqlens_k[b] / page_size)); saturates at INT64_MAX; 0 when not paged.
  int64_t num_pages() const;

  /// one line, e.g. "f16 b1 sq4096 sk4096 hq32 hkv8 d128/v128 mask=causalbr bias=none lse=0" (then
  /// " softcap=C", " window_left=L window_right=R" (a window mask or sizes other than -1), " sinks=1",
  /// " alibi=1", " seqlens_q=L1:L2:... seqlens_k=L1:L2:...", " seqused_k=1" and " page_size=N" when set)
  std::string str() const;
};

/// Largest sum of a packed batch's lengths (total_q, total_k: rows counted by int32 offsets).
inline constexpr int64_t kMaxPackedRows = 2147483647;

/// An AttentionProblem over contiguous BSHD tensors at fake (aligned, never
/// dereferenced) addresses: enough for plan() and check_problem(). A bias is
/// [batch, heads_q, seqlen_q, seqlen_k] contiguous; LSE [batch, heads_q, seqlen_q];
/// sinks [heads_q] and ALiBi slopes [heads_q] (alibi_stride_batch 0) at fake
/// 16-byte aligned addresses when set. A packed batch (d.varlen()): Q/O
/// [total_q, heads_q, d] and K/V [total_k, heads_kv, d] contiguous (stride_batch 0),
/// LSE [heads_q, total_q], cu_seqlens_q / cu_seqlens_k (and seqused_k when set) at
/// fake 16-byte aligned addresses, total_q / total_k the sums, seqlen_q / seqlen_k
/// the maxima. A paged cache (d.paged()): page_table at a fake 16-byte aligned address,
/// page_table_stride = ceil(seqlen_k / page_size), num_pages = d.num_pages(), K/V
/// [num_pages, page_size, heads_kv, d] (stride_batch = page_size * stride_seq); packed
/// too: cu_seqlens_k null, total_k 0 and seqused_k set (the counts are seqlens_k).
AttentionProblem to_problem(const ProblemDesc& d);

/// Parse "key=value,key=value,..." (keys: name, dtype, batch, seqlen, seqlen_q,
/// seqlen_k, heads, heads_q, heads_kv, head_dim, head_dim_v, mask, bias, lse, softcap,
/// window_left, window_right, sinks, alibi, seqlens_q, seqlens_k, seqused_k, page_size).
/// seqlen sets both seqlens, heads both head counts (and cannot be combined
/// with seqlen_q / seqlen_k, heads_q / heads_kv); head_dim_v defaults to
/// head_dim and seqlen_k to seqlen_q. batch, seqlens and heads are integers in
/// [0, kMaxProblemSize], head dims in [0, kMaxHeadDimArg], window sizes in
/// [-1, kMaxProblemSize] (-1, the default: unbounded; the library takes them
/// with mask windowtl or windowbr only); lse, sinks, alibi and seqused_k are booleans
/// (true, false, 1, 0, yes, no). seqlens_q=L1:L2:... and seqlens_k=L1:L2:... (given
/// together, the same number of lengths, each an integer in [0, 2^31 - 1], each list's
/// sum at most 2^31 - 1) make a packed batch: batch is the count (an explicit batch
/// must equal it), seqlen_q / seqlen_k default to the largest length (explicit ones
/// are the bounds, max_seqlen_q / max_seqlen_k, and must be at least that);
/// seqused_k=1 needs them (or page_size). page_size=N (a power of two in [1, 256]) makes
/// the KV cache paged, dense or packed. An empty text or an empty field (a trailing, leading or
/// doubled ',') is refused. Throws InvalidArgument naming the key (or the empty field), its value
/// and what is allowed.
ProblemDesc parse_problem_text(const std::string& text);

/// A YAML problem set ("problems seen in production"):
///   problems:
///     - {name: llama3-8b-prefill, dtype: f16, batch: 1, seqlen_q: 4096, heads_q: 32, heads_kv: 8,
///        head_dim: 128, mask: causalbr}
/// Keys and values as for parse_problem_text.
/// Required: dtype, head_dim, seqlen_q (or seqlen, or seqlens_q), heads_q (or heads);
/// optional: name, batch (1), seqlen_k (= seqlen_q), heads_kv (= heads_q),
/// head_dim_v (= head_dim), mask (none), bias (none), lse (false), softcap (0),
/// window_left (-1), window_right (-1), sinks (false), alibi (false), seqlens_q and
/// seqlens_k ("L1:L2:..." or a sequence [L1, L2, ...]), seqused_k (false), page_size (0: not paged).
/// Unknown keys are errors, and so is a second YAML document (empty ones aside). Throws
/// InvalidArgument "<origin>: key '<path>' <reason>" (e.g. "key 'problems[2].dtype' has value a
/// sequence: ...").
std::vector<ProblemDesc> parse_problem_set(const std::string& yaml_text, const std::string& origin);
/// parse_problem_set of the file `path` (gen::read_yaml_file: IoError for a file that is
/// missing, not a regular file, or larger than 16 MiB).
std::vector<ProblemDesc> load_problem_set(const std::string& path);

// ---- progress ------------------------------------------------------------------

/// `n` and the noun in agreement with it: "1 kernel", "2 kernels"; `plural` for a
/// noun that does not just add an "s": count_of(1, "entry", "entries") is "1 entry".
std::string count_of(size_t n, const std::string& noun, const std::string& plural = "");

/// Progress of a counted job on stderr: on a terminal, one redrawn line with a
/// bar, count, rate and ETA; otherwise one plain line per finished item.
class Progress {
 public:
  /// `tty`: draw a bar (normally isatty(fileno(out))).
  Progress(std::string what, size_t total, FILE* out, bool tty);
  /// One item finished; `line` describes it (printed as is when not a tty).
  void step(const std::string& line, bool failed = false);
  /// Ends the bar line (tty). Idempotent.
  void finish();
  double elapsed() const;

  /// "12.3 s", "4m05s", "1h02m".
  static std::string duration(double seconds);

 private:
  void draw(bool force);
  std::string what_;
  size_t total_;
  size_t done_ = 0;
  size_t failed_ = 0;
  FILE* out_;
  bool tty_;
  bool finished_ = false;
  double start_;
  double last_draw_ = -1.0;
  std::mutex mu_;
};

/// True when `f` is a terminal.
bool is_terminal(FILE* f);

// ---- the cache pregen writes into ----------------------------------------------

/// The directory a pregen writes kernels into: the user cache, or the bundle of
/// `flashgen pregen --out` once rt::cache_override has set it; created when it does
/// not exist yet. Throws IoError "<what> cannot receive kernels: <why>" (why names
/// the directory and its problem: writable by others, not a directory, ...) when
/// compiled kernels would be kept in memory only, i.e. thrown away at exit. Shared
/// by `flashgen pregen` and the Python package's pregen(), before they compile.
std::string pregen_target_dir(const std::string& what);

// ---- ptxas report ------------------------------------------------------------

/// The per-kernel numbers of a ptxas --verbose report (the NVRTC log).
struct PtxasReport {
  bool found = false;         ///< a "Used N registers" line was seen
  int registers = 0;
  int64_t spill_stores = 0;   ///< bytes
  int64_t spill_loads = 0;    ///< bytes
  int64_t stack_frame = 0;    ///< bytes
  int64_t smem_static = 0;    ///< bytes of static shared memory ("N bytes smem")
};
PtxasReport parse_ptxas(const std::string& log);

// ---- the tile model ----------------------------------------------------------

/// What the model needs of a GPU beyond the profile (0 = unknown).
struct DeviceShape {
  int sm_count = 0;
  double clock_ghz = 0.0;
};

/// The model's numbers for one spec on one problem. Units: FLOP, bytes, SM clocks.
struct TileModel {
  KernelSpec spec;
  int registers = 0;            ///< per thread (ptxas if measured, else estimated)
  bool registers_measured = false;
  int64_t spill_bytes = 0;      ///< ptxas spill stores + loads
  // work
  double flops = 0;             ///< useful FLOPs of the problem: 4*B*Hq*Sq*Sk_eff*(D+Dv)/2
  double tile_flops = 0;        ///< FLOPs one thread block executes (tiles padded to block_m x block_n)
  int64_t blocks = 0;           ///< thread blocks in the grid (a packed batch: sized by max_seqlen_q)
  // bytes
  double unique_bytes = 0;      ///< Q + K + V + O (+ bias, LSE): what DRAM must move at least
  double tile_global_bytes = 0; ///< bytes one block moves between global memory and the SM (Q, K/V stream, O)
  double tile_smem_bytes = 0;   ///< shared-memory traffic of one block (cp.async writes + ldmatrix reads)
  // intensities (FLOP per byte) and the profile's ridge points
  double ai_dram = 0;           ///< flops / unique_bytes
  double ai_tile = 0;           ///< tile_flops / tile_global_bytes
  double ai_smem = 0;           ///< tile_flops / tile_smem_bytes
  double ridge_dram = 0;        ///< mma_flop_per_clock_per_sm / dram_bytes_per_clock_per_sm
  double ridge_smem = 0;        ///< mma_flop_per_clock_per_sm / smem_bytes_per_clock_per_sm
  // occupancy
  int blocks_per_sm = 0;        ///< min over shared memory, registers, threads
  std::string occupancy_limit;  ///< "shared memory", "registers", "threads", "blocks"
  int resident_warps = 0;
  double latency_efficiency = 0;  ///< min(warps: resident / kWarpsToHideLatency, steps: see tools/flashgen_model.cpp)
  double spill_efficiency = 1;   ///< 1 / (1 + spill_bytes / 64 per key tile, or per work item for wgmma)
  double wave_efficiency = 1;     ///< blocks / (waves * SMs * blocks_per_sm) (1 when SMs unknown; a packed
                                  ///< batch counts the blocks with rows)
  double padding_efficiency = 1;  ///< useful / executed FLOPs
  // verdict
  double flop_per_clock_per_sm = 0;  ///< modelled attained rate
  std::string bound;            ///< "matrix unit", "shared memory", "memory", "latency"
  double score = 0;             ///< modelled fraction of the matrix-unit peak (0..1); higher is better
  bool fits = true;             ///< at least one block fits an SM and no rule is broken
  std::string why_not;          ///< when !fits
};

/// Warps per SM that keep mma.sync busy (two per SM sub-partition).
inline constexpr int kWarpsToHideLatency = 8;

/// Registers per thread the model expects for `spec` (accumulators of O and S,
/// Q fragments, row statistics, ~40 for addressing).
int estimate_registers(const KernelSpec& spec);

/// The model for `spec` on `problem` (spec must match the problem's features).
/// registers < 0: estimate them.
TileModel model_tile(const KernelSpec& spec, const ProblemDesc& problem, const Profile& profile,
                     const DeviceShape& dev, int registers = -1, int64_t spill_bytes = 0);

/// Every tile (block_m, block_n, warps, stages) that passes validate() for the
/// problem's features on `arch` and fits the profile's shared memory and
/// register budgets (estimated registers <= 255 and at least one block per SM),
/// ranked best first by the model.
std::vector<TileModel> rank_tiles(const ProblemDesc& problem, int arch, const Profile& profile,
                                  const DeviceShape& dev);

/// The warps of one block of `spec` as explain and tune print them: "8w", or for a
/// unit with a producer warpgroup (wgmma) its consumer warps + producer warps, "12+4w"
/// (spec.tile.warps counts the consumers; the block runs spec.threads() threads).
std::string block_warps(const KernelSpec& spec);
/// Blocks per SM x block_warps, e.g. "2 x 4w", "1 x 12+4w" (tune's occupancy column, explain's occupancy).
std::string occupancy_text(const TileModel& m);

/// The spec `problem` gets on `arch` with `tile`.
KernelSpec spec_with_tile(const ProblemDesc& problem, int arch, const Profile& profile, const Tile& tile);

/// Useful FLOPs of a problem: 4*B*Hq*Sq*Sk*(D+Dv)/2, causal and window masks
/// counting only the keys each query sees (row i: keys j with
/// max(0, i + off - window_left) <= j <= min(seqlen_k - 1, i + off + window_right));
/// a packed batch sums each sequence's own (seqlens_q[b], seqlens_k[b]).
double problem_flops(const ProblemDesc& p);

}  // namespace flashgen::cli
