// libflashgen — tune files: measured tiles that override a profile's default
// `flash:` rows for one device, arch and problem class.
//
// `flashgen tune` measures candidate tiles on a GPU and writes the winners to
// a tune file; plan() reads tune files and uses an entry when its device name,
// arch, profile hash and problem class all equal those of the call. An entry
// made on another device or arch, or against another version of the profile,
// is ignored with one notice on stderr.
//
// Files plan() reads, in order (the first matching entry wins):
//   1. $FLASHGEN_TUNE_FILE, if set (one path);
//   2. tune.yml in the user cache directory (default_tune_file_path()).
// A missing tune.yml is silently skipped; a missing $FLASHGEN_TUNE_FILE, and an
// unreadable or invalid file, are ignored with one warning on stderr (tune
// files only ever change speed, never results). Files are re-read when they
// change.
//
// Format (YAML; every key required but `softcap`, `sinks`, `alibi`, `varlen` and
// `paged` in `problem` (true for a softcap, sinks, ALiBi, packed-batch or paged-KV
// specialization, after `lse` in that order; absent: false), unknown keys rejected):
//
//   version: 1
//   entries:
//     - device: NVIDIA H200             # cuDeviceGetName of the measured GPU
//       arch: 90                        # 10*major+minor
//       profile: hopper                 # Profile::name
//       profile_hash: 5c0d0b2a3e91f4a7  # profile_hash(), 16 hex digits
//       generator: 0.4.0                # kGeneratorVersion of the measuring library
//       problem: {dtype: f16, head_dim: 128, head_dim_v: 128, mask: causalbr, bias: none,
//                 lse: false, seqlen_q_le: 4096}
//       tile: {block_m: 128, block_n: 64, warps: 8, stages: 2}
//       tflops: 345.2                   # measured, 10^12 FLOP/s (4*B*Hq*Sq*Sk*D, /2 if causal)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashgen/problem.hpp"
#include "flashgen/profile.hpp"
#include "flashgen/types.hpp"

namespace flashgen {

/// What a tune entry is keyed by: every field that changes the generated
/// code except the tile, plus a seqlen bucket (the tile that wins depends on
/// how many query blocks there are).
struct ProblemClass {
  DType dtype = DType::f16;
  int head_dim = 64;               ///< elements
  int head_dim_v = 64;             ///< elements
  MaskKind mask = MaskKind::none;
  BiasKind bias = BiasKind::none;
  bool has_lse = false;
  bool softcap = false;            ///< logit softcapping on (AttentionProblem::softcap > 0)
  bool sinks = false;              ///< attention sinks on (AttentionProblem::sinks set)
  bool alibi = false;              ///< ALiBi on (AttentionProblem::alibi_slopes set)
  bool varlen = false;             ///< packed batch (AttentionProblem::cu_seqlens_q set)
  bool paged = false;              ///< paged KV cache (AttentionProblem::page_table set)
  int64_t seqlen_q_le = 64;        ///< bucket: seqlen_q_bucket(seqlen_q) (packed: of max_seqlen_q)

  bool operator==(const ProblemClass&) const = default;
  /// e.g. "f16 d128/v128 mask=causalbr bias=none lse=0 seqlen_q<=4096" (" softcap", " sinks",
  /// " alibi", " varlen", " paged" after lse= when set)
  std::string str() const;
};

/// The smallest power of two >= seqlen_q, at least 64 (1..64 -> 64,
/// 65..128 -> 128, 4096 -> 4096, 79200 -> 131072).
int64_t seqlen_q_bucket(int64_t seqlen_q);

/// The class of `p` (does not check the problem).
ProblemClass problem_class(const AttentionProblem& p);

struct TuneEntry {
  std::string device;        ///< device name (cuDeviceGetName), non-empty
  int arch = 0;              ///< compute capability, 10*major+minor
  std::string profile;       ///< profile name
  std::string profile_hash;  ///< profile_hash(profile) when measured, 16 lowercase hex digits
  std::string generator;     ///< kGeneratorVersion of the library that measured it
  ProblemClass problem;
  Tile tile;                 ///< the measured tile
  double tflops = 0.0;       ///< measured throughput, 10^12 FLOP/s, >= 0
};

struct TuneFile {
  std::vector<TuneEntry> entries;
};

/// Parse a tune file. Every field is validated (names, ranges, tile rules
/// that need no profile: block_m a multiple of 16 * warps, block_n of 16, ...),
/// unknown keys, a second YAML document (empty ones aside) and duplicate entries
/// (same device, arch, profile hash and problem class) are rejected. Throws InvalidArgument "<origin>: key '<path>'
/// <reason>" (or "<origin>: <reason>" for the document as a whole). Never
/// throws anything else for any input.
TuneFile parse_tune_file(const std::string& yaml_text, const std::string& origin);

/// Read and parse a tune file. Throws IoError if unreadable, InvalidArgument if invalid.
TuneFile load_tune_file(const std::string& path);

/// The YAML text of `file` (parse_tune_file(format_tune_file(f)) == f, tflops
/// to 0.1).
std::string format_tune_file(const TuneFile& file);

/// Write `file` to `path` atomically (temp file + rename). Throws IoError.
void save_tune_file(const std::string& path, const TuneFile& file);

/// Add `entries` to `file`, replacing entries with the same device, arch,
/// profile hash and problem class.
void merge_tune_entries(TuneFile& file, const std::vector<TuneEntry>& entries);

/// XXH3-64 (16 hex digits) of every profile field that bounds or models a
/// tile: name, archs, matrix unit, resources and ceiling. The default
/// `flash:` rows are not included: a tune entry replaces them.
std::string profile_hash(const Profile& profile);

/// tune.yml in the user cache directory ($FLASHGEN_CACHE_DIR, else
/// $XDG_CACHE_HOME/flashgen, else ~/.cache/flashgen); "" when there is none.
std::string default_tune_file_path();

/// The tune files plan() reads, in order: $FLASHGEN_TUNE_FILE (if set and not
/// empty; a relative value is taken from the working directory the first time
/// that value is seen, and returned absolute), then default_tune_file_path()
/// (if any).
std::vector<std::string> tune_file_paths();

/// The tile a tune entry gives for `cls` on `device_name` / `arch` with
/// `profile`, and the file it came from. Entries of the same class made on
/// another device, arch or profile hash are ignored with one notice each on
/// stderr; with an empty `device_name` (no GPU to compare with) every entry
/// is ignored with one notice. Does not validate the tile against the profile
/// (plan() does, and ignores an entry whose tile is invalid, with a notice).
struct TunedTile {
  Tile tile;
  std::string file;
  TuneEntry entry;
};
std::optional<TunedTile> find_tuned_tile(const ProblemClass& cls, int arch, const Profile& profile,
                                         const std::string& device_name);

}  // namespace flashgen
