// flashgen CLI: problem descriptions, problem-set files, progress display,
// ptxas report parsing (see tools/flashgen_cli.hpp).
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "gen/yaml_reader.hpp"
#include "tools/flashgen_cli.hpp"

namespace flashgen::cli {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool parse_bool(const std::string& what, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  throw InvalidArgument(fmt::format("{} has value '{}': allowed: true, false (or 1, 0, yes, no)", what, value));
}

// a * b, or the largest int64 on overflow (both >= 0): a size no tensor can
// have, which check_problem() then refuses as an overflowing offset.
int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

// The keys that set two fields at once, and the keys each one sets.
struct Alias {
  const char* key;
  const char* first;
  const char* second;
};
constexpr Alias kAliases[] = {{"seqlen", "seqlen_q", "seqlen_k"}, {"heads", "heads_q", "heads_kv"}};

// "L1:L2:..." as per-sequence lengths (seqlens_q / seqlens_k): each an integer
// in [0, 2^31 - 1], their sum at most 2^31 - 1 (the packed rows, counted by
// int32 offsets).
std::vector<int64_t> parse_lengths(const std::string& what, const std::string& value) {
  std::vector<int64_t> out;
  int64_t sum = 0;
  for (size_t pos = 0;;) {
    const size_t colon = value.find(':', pos);
    const std::string item = value.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    const std::optional<int64_t> v = int_in_range(item, 0, kMaxPackedRows);
    if (!v) {
      throw InvalidArgument(fmt::format("{} has value '{}': length {} ('{}') must be an integer in [0, {}] (one "
                                        "length per sequence, separated by ':', e.g. 100:37:512), {}",
                                        what, value, out.size() + 1, item, kMaxPackedRows, integer_form(0)));
    }
    sum += *v;  // (each <= 2^31 - 1 and the sum so far too: no overflow)
    if (sum > kMaxPackedRows) {
      throw InvalidArgument(fmt::format("{} has value '{}': the first {} lengths add up to {}, more than {} = 2^31 - 1 "
                                        "(a packed batch's rows are counted by int32 offsets, cu_seqlens)",
                                        what, value, out.size() + 1, sum, kMaxPackedRows));
    }
    out.push_back(*v);
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return out;
}

std::string join_lengths(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ":" : "") + std::to_string(v[i]);
  return out;
}

// Applies key=value to `d`; `seen` tracks which keys were given.
void apply(ProblemDesc& d, std::map<std::string, bool>& seen, const std::string& where, const std::string& key,
           const std::string& value) {
  const std::string what = fmt::format("{} '{}'", where, key);
  if (seen[key]) throw InvalidArgument(fmt::format("{} appears more than once", what));
  // An alias and a key it sets would give one field two values.
  for (const Alias& a : kAliases) {
    const bool is_alias = key == a.key, is_part = key == a.first || key == a.second;
    if (!is_alias && !is_part) continue;
    for (const char* other : is_alias ? std::vector<const char*>{a.first, a.second} : std::vector<const char*>{a.key}) {
      if (!seen[other]) continue;
      throw InvalidArgument(fmt::format("{} cannot be combined with key '{}': '{}' sets both '{}' and '{}'; give "
                                        "'{}' alone, or '{}' and '{}'",
                                        what, other, a.key, a.first, a.second, a.key, a.first, a.second));
    }
  }
  seen[key] = true;
  if (key == "name") {
    // (a label, but an empty value is refused like any other key's: never taken as the default)
    if (value.empty()) throw InvalidArgument(fmt::format("{} has value '': must be a non-empty label", what));
    d.name = value;
  } else if (key == "dtype") {
    d.dtype = parse_dtype(value, what);
  } else if (key == "batch") {
    d.batch = parse_int_arg(what, value, 0, kMaxProblemSize);
  } else if (key == "seqlen") {
    d.seqlen_q = d.seqlen_k = parse_int_arg(what, value, 0, kMaxProblemSize);
  } else if (key == "seqlen_q") {
    d.seqlen_q = parse_int_arg(what, value, 0, kMaxProblemSize);
  } else if (key == "seqlen_k") {
    d.seqlen_k = parse_int_arg(what, value, 0, kMaxProblemSize);
  } else if (key == "heads") {
    d.heads_q = d.heads_kv = parse_int_arg(what, value, 0, kMaxProblemSize);
  } else if (key == "heads_q") {
    d.heads_q = parse_int_arg(what, value, 0, kMaxProblemSize);
  } else if (key == "heads_kv") {
    d.heads_kv = parse_int_arg(what, value, 0, kMaxProblemSize);
  } else if (key == "head_dim") {
    d.head_dim = parse_int_arg(what, value, 0, kMaxHeadDimArg);
  } else if (key == "head_dim_v") {
    d.head_dim_v = parse_int_arg(what, value, 0, kMaxHeadDimArg);
  } else if (key == "mask") {
    d.mask = parse_mask(value, what);
  } else if (key == "bias") {
    d.bias = parse_bias(value, what);
  } else if (key == "lse") {
    d.lse = parse_bool(what, value);
  } else if (key == "softcap") {
    const std::optional<double> v = real_in_range(value, 0.0, kMaxSoftcap);
    if (!v || (*v != 0.0 && *v < std::numeric_limits<float>::min()))
      throw InvalidArgument(fmt::format("{} has value '{}': must be 0 (off) or a cap in [{}, {}]", what, value,
                                        std::numeric_limits<float>::min(), kMaxSoftcap));
    d.softcap = static_cast<float>(*v);
  } else if (key == "window_left") {
    d.window_left = parse_int_arg(what, value, -1, kMaxProblemSize);
  } else if (key == "window_right") {
    d.window_right = parse_int_arg(what, value, -1, kMaxProblemSize);
  } else if (key == "sinks") {
    d.sinks = parse_bool(what, value);
  } else if (key == "alibi") {
    d.alibi = parse_bool(what, value);
  } else if (key == "seqlens_q") {
    d.seqlens_q = parse_lengths(what, value);
  } else if (key == "seqlens_k") {
    d.seqlens_k = parse_lengths(what, value);
  } else if (key == "seqused_k") {
    d.seqused_k = parse_bool(what, value);
  } else if (key == "page_size") {
    const std::optional<int64_t> v = int_in_range(value, 1, kMaxPageSize);
    if (!v || (*v & (*v - 1)) != 0)
      throw InvalidArgument(fmt::format("{} has value '{}': must be a power of two in [1, {}] (keys per page of a "
                                        "paged KV cache), {}",
                                        what, value, kMaxPageSize, integer_form(1)));
    d.page_size = *v;
  } else {
    throw InvalidArgument(fmt::format("{} is unknown; allowed keys: name, dtype, batch, seqlen, seqlen_q, seqlen_k, "
                                      "heads, heads_q, heads_kv, head_dim, head_dim_v, mask, bias, lse, softcap, "
                                      "window_left, window_right, sinks, alibi, seqlens_q, seqlens_k, seqused_k, "
                                      "page_size",
                                      what));
  }
}

// Defaults that depend on other keys, and the required keys.
void complete(ProblemDesc& d, std::map<std::string, bool>& seen, const std::string& where_in) {
  // "<where> key '...' is missing": --problem's `where` already ends in "key".
  const std::string where = where_in.ends_with(" key") ? where_in : where_in + " key";
  if (!seen["head_dim"]) throw InvalidArgument(fmt::format("{} 'head_dim' is missing", where));
  const bool packed = seen["seqlens_q"] || seen["seqlens_k"];
  if (!packed && !seen["seqlen"] && !seen["seqlen_q"])
    throw InvalidArgument(fmt::format("{} 'seqlen_q' (or 'seqlen') is missing (a packed batch gives 'seqlens_q' and "
                                      "'seqlens_k' instead)",
                                      where));
  if (!seen["heads"] && !seen["heads_q"])
    throw InvalidArgument(fmt::format("{} 'heads_q' (or 'heads') is missing", where));
  if (!seen["head_dim_v"]) d.head_dim_v = d.head_dim;
  if (!seen["heads"] && !seen["heads_kv"]) d.heads_kv = d.heads_q;
  if (!packed) {
    if (!seen["seqlen"] && !seen["seqlen_k"]) d.seqlen_k = d.seqlen_q;
    if (d.seqused_k && !d.paged())
      throw InvalidArgument(fmt::format("{} 'seqused_k' is set without 'seqlens_q' and 'seqlens_k' or 'page_size': "
                                        "seqused_k is an array of a packed batch or a paged KV cache; give the "
                                        "per-sequence lengths or a page size too",
                                        where));
    return;
  }
  // A packed batch: the counts, batch, and the bounds max_seqlen_q / max_seqlen_k.
  for (const char* key : {"seqlens_q", "seqlens_k"})
    if (!seen[key])
      throw InvalidArgument(fmt::format("{} '{}' is missing: seqlens_q and seqlens_k describe a packed batch together "
                                        "(one query length and one key length per sequence)",
                                        where, key));
  if (d.seqlens_q.size() != d.seqlens_k.size())
    throw InvalidArgument(fmt::format("{} 'seqlens_k' has {} lengths and 'seqlens_q' {}: a packed batch has one of "
                                      "each per sequence",
                                      where, d.seqlens_k.size(), d.seqlens_q.size()));
  const auto count = static_cast<int64_t>(d.seqlens_q.size());
  if (seen["batch"] && d.batch != count)
    throw InvalidArgument(fmt::format("{} 'batch' ({}) conflicts with 'seqlens_q' ({} sequence{}): a packed batch has "
                                      "one sequence per length; leave batch out or make it {}",
                                      where, d.batch, count, count == 1 ? "" : "s", count));
  d.batch = count;
  const struct {
    const char* key;
    const char* list;
    const std::vector<int64_t>& lengths;
    int64_t& bound;
  } sides[] = {{"seqlen_q", "seqlens_q", d.seqlens_q, d.seqlen_q}, {"seqlen_k", "seqlens_k", d.seqlens_k, d.seqlen_k}};
  for (const auto& side : sides) {
    const int64_t longest = *std::max_element(side.lengths.begin(), side.lengths.end());
    const char* given = seen[side.key] ? side.key : seen["seqlen"] ? "seqlen" : nullptr;
    if (given == nullptr) {
      side.bound = longest;  // max_seqlen
    } else if (side.bound < longest) {
      throw InvalidArgument(fmt::format("{} '{}' ({}) is less than the longest of '{}' ({}): with per-sequence "
                                        "lengths it is their bound (max_{}); leave it out or make it at least {}",
                                        where, given, side.bound, side.list, longest, side.key, longest));
    }
  }
}

}  // namespace

std::optional<int64_t> int_in_range(const std::string& text, int64_t lo, int64_t hi) {
  // Plain decimal, as the tool prints numbers: a leading zero ("08", "-0") is refused, not read as 8 here
  // and as octal by CLI11's conversion after the check ("--arch 075" was sm_61). from_chars refuses '+'
  // and spaces.
  const size_t first = !text.empty() && text[0] == '-' ? 1 : 0;
  if (text.size() > first && text[first] == '0' && (first == 1 || text.size() > 1)) return std::nullopt;
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) return std::nullopt;
  return v;
}

std::string integer_form(int64_t lo) {
  return lo < 0 ? "in plain decimal (no '+', leading zeros or spaces)"
                : "in plain decimal (no sign, leading zeros or spaces)";
}

std::optional<double> real_in_range(const std::string& text, double lo, double hi) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  // !(lo <= v && v <= hi) also refuses NaN; from_chars reads "inf" and "nan" too.
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v) || !(lo <= v && v <= hi))
    return std::nullopt;
  return v;
}

int64_t parse_int_arg(const std::string& what, const std::string& text, int64_t lo, int64_t hi) {
  const std::optional<int64_t> v = int_in_range(text, lo, hi);
  if (!v)
    throw InvalidArgument(
        fmt::format("{} has value '{}': must be an integer in [{}, {}] {}", what, text, lo, hi, integer_form(lo)));
  return *v;
}

int64_t ProblemDesc::total_q() const {
  int64_t n = 0;
  for (int64_t l : seqlens_q) n += l;  // (the parser keeps the sum within int32)
  return n;
}

int64_t ProblemDesc::total_k() const {
  int64_t n = 0;
  for (int64_t l : seqlens_k) n += l;
  return n;
}

int64_t ProblemDesc::page_table_stride() const {
  return paged() ? (seqlen_k + page_size - 1) / page_size : 0;  // (seqlen_k <= 2^40: no overflow)
}

int64_t ProblemDesc::num_pages() const {
  if (!paged()) return 0;
  if (!varlen()) return saturating_mul(batch, page_table_stride());
  int64_t n = 0;
  for (int64_t l : seqlens_k) n += (l + page_size - 1) / page_size;  // (the sum of seqlens_k fits int32)
  return n;
}

std::string ProblemDesc::str() const {
  const bool window = mask == MaskKind::window_top_left || mask == MaskKind::window_bottom_right || window_left != -1 ||
                      window_right != -1;
  return fmt::format("{}{} b{} sq{} sk{} hq{} hkv{} d{}/v{} mask={} bias={} lse={}{}{}{}{}{}{}{}",
                     name.empty() ? "" : name + ": ", to_string(dtype), batch, seqlen_q, seqlen_k, heads_q, heads_kv,
                     head_dim, head_dim_v, to_string(mask), to_string(bias), lse ? 1 : 0,
                     softcap > 0.f ? fmt::format(" softcap={}", softcap) : std::string(),
                     window ? fmt::format(" window_left={} window_right={}", window_left, window_right) : std::string(),
                     sinks ? " sinks=1" : "", alibi ? " alibi=1" : "",
                     varlen() ? fmt::format(" seqlens_q={} seqlens_k={}", join_lengths(seqlens_q), join_lengths(seqlens_k))
                              : std::string(),
                     seqused_k ? " seqused_k=1" : "",
                     paged() ? fmt::format(" page_size={}", page_size) : std::string());
}

AttentionProblem to_problem(const ProblemDesc& d) {
  const void* fake = reinterpret_cast<const void*>(uintptr_t{0x10000000});
  AttentionProblem p = make_bshd_problem(d.dtype, d.batch, d.seqlen_q, d.seqlen_k, d.heads_q, d.heads_kv, d.head_dim,
                                         d.head_dim_v, d.mask, fake, fake, fake, const_cast<void*>(fake));
  p.softcap = d.softcap;
  p.window_left = d.window_left;
  p.window_right = d.window_right;
  if (d.sinks) p.sinks = reinterpret_cast<const float*>(uintptr_t{0x30000000});
  if (d.alibi) p.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x40000000});  // [heads_q], stride 0
  if (d.bias != BiasKind::none) {
    p.bias.kind = d.bias;
    p.bias.data = fake;
    p.bias.stride_k = 1;
    p.bias.stride_q = d.seqlen_k;
    p.bias.stride_head = saturating_mul(d.seqlen_q, d.seqlen_k);
    p.bias.stride_batch = saturating_mul(d.heads_q, p.bias.stride_head);
  }
  if (d.lse) {
    p.lse.data = reinterpret_cast<float*>(uintptr_t{0x20000000});
    p.lse.stride_head = std::max<int64_t>(1, d.seqlen_q);
    p.lse.stride_batch = std::max<int64_t>(1, saturating_mul(d.heads_q, d.seqlen_q));
  }
  if (d.varlen()) {
    // One batch of packed rows: [total, heads, d] (the strides make_bshd_problem gave
    // within a batch), LSE [heads_q, total_q], the offsets at fake addresses.
    for (TensorRef* t : {&p.q, &p.k, &p.v, &p.o}) t->stride_batch = 0;
    p.cu_seqlens_q = reinterpret_cast<const int32_t*>(uintptr_t{0x50000000});
    p.cu_seqlens_k = reinterpret_cast<const int32_t*>(uintptr_t{0x60000000});
    if (d.seqused_k) p.seqused_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70000000});
    p.total_q = d.total_q();
    p.total_k = d.total_k();
    if (d.lse) {
      p.lse.stride_head = std::max<int64_t>(1, p.total_q);
      p.lse.stride_batch = 0;
    }
  }
  if (d.paged()) {
    // K/V [num_pages, page_size, heads_kv, d]: a page's slots at the row stride, pages one after another.
    p.page_table = reinterpret_cast<const int32_t*>(uintptr_t{0x80000000});
    p.page_size = d.page_size;
    p.page_table_stride = d.page_table_stride();
    p.num_pages = d.num_pages();
    for (TensorRef* t : {&p.k, &p.v}) t->stride_batch = saturating_mul(d.page_size, t->stride_seq);
    if (d.varlen()) {
      // No cu_seqlens_k: the keys are found through the pages and seqused_k counts them (seqlens_k).
      p.cu_seqlens_k = nullptr;
      p.total_k = 0;
      p.seqused_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70000000});
    } else if (d.seqused_k) {
      p.seqused_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70000000});
    }
  }
  return p;
}

ProblemDesc parse_problem_text(const std::string& text) {
  ProblemDesc d;
  std::map<std::string, bool> seen;
  const std::string where = fmt::format("--problem '{}': key", text);
  if (text.empty()) throw InvalidArgument("--problem '' is empty (expected key=value,key=value,...)");
  size_t pos = 0;
  for (size_t field = 1; pos <= text.size(); ++field) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) {
      // A trailing ',' (or ",,") is a field with nothing in it, not the end of the list.
      throw InvalidArgument(fmt::format("--problem '{}': field {} is empty ({}; expected key=value,key=value,...)",
                                        text, field,
                                        comma == text.size() ? "a trailing ','"
                                        : field == 1         ? "a leading ','"
                                                             : "two ',' in a row"));
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw InvalidArgument(fmt::format("--problem '{}': item '{}' has no '=' (expected key=value)", text, item));
    apply(d, seen, where, item.substr(0, eq), item.substr(eq + 1));
  }
  complete(d, seen, where);
  return d;
}

std::vector<ProblemDesc> parse_problem_set(const std::string& yaml_text, const std::string& origin) {
  const YAML::Node root =
      gen::load_one_document(yaml_text, origin, "problem file", ": put every problem in its one 'problems' list");
  if (!root.IsMap() || root.size() != 1 || !root["problems"]) {
    throw InvalidArgument(
        fmt::format("{}: the document must be a mapping with the single key 'problems' (a list of problems)", origin));
  }
  const YAML::Node list = root["problems"];
  if (!list.IsSequence() || list.size() == 0)
    throw InvalidArgument(fmt::format("{}: key 'problems' must be a non-empty sequence of mappings", origin));
  std::vector<ProblemDesc> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = fmt::format("problems[{}]", i);
    const YAML::Node item = list[i];
    if (!item.IsMap()) throw InvalidArgument(fmt::format("{}: key '{}' must be a mapping", origin, path));
    ProblemDesc d;
    std::map<std::string, bool> seen;
    const std::string where = fmt::format("{}: {}", origin, path);
    for (auto it = item.begin(); it != item.end(); ++it) {
      // (the per-sequence lengths may also be a sequence of scalars: [L1, L2, ...])
      const bool lengths = it->first.IsScalar() && (it->first.Scalar() == "seqlens_q" || it->first.Scalar() == "seqlens_k");
      std::string value;
      if (lengths && it->second.IsSequence()) {
        for (size_t j = 0; j < it->second.size(); ++j) {
          if (!it->second[j].IsScalar())
            throw InvalidArgument(fmt::format("{}: key '{}.{}' must be \"L1:L2:...\" or a sequence of integers",
                                              origin, path, it->first.Scalar()));
          value += (j ? ":" : "") + it->second[j].Scalar();
        }
      } else if (!it->first.IsScalar()) {
        throw InvalidArgument(fmt::format("{}: key '{}' has a key that is {}, not a name (a problem maps names to "
                                          "values, e.g. head_dim: 128)",
                                          origin, path, gen::YamlReader::describe(it->first)));
      } else if (!it->second.IsScalar()) {
        // Name the key: "key 'problems[2].dtype' has value a sequence: must be a single value (a scalar, ...)".
        throw InvalidArgument(fmt::format("{}: key '{}.{}' has {}: must be {}", origin, path,
                                          gen::YamlReader::shown(it->first.Scalar()),
                                          it->second.IsNull() ? std::string("no value")
                                                              : "value " + gen::YamlReader::describe(it->second),
                                          lengths ? "\"L1:L2:...\" or a sequence of integers"
                                                  : "a single value (a scalar, e.g. f16, 128 or causalbr)"));
      } else {
        value = it->second.Scalar();
      }
      const std::string key = it->first.Scalar();
      try {
        apply(d, seen, where + " key", key, value);
      } catch (const InvalidArgument& e) {
        // Rephrase as "<origin>: key '<path>.<key>' ..." from the message's "key '<key>' ..." part.
        std::string m = e.what();
        const std::string marker = fmt::format("key '{}'", key);
        const size_t at = m.find(marker);
        if (at != std::string::npos)
          m = fmt::format("{}: key '{}.{}'{}", origin, path, key, m.substr(at + marker.size()));
        throw InvalidArgument(m);
      }
    }
    complete(d, seen, where);
    out.push_back(d);
  }
  return out;
}

std::vector<ProblemDesc> load_problem_set(const std::string& path) {
  return parse_problem_set(gen::read_yaml_file(path, "problem file"), path);
}

// ---- progress ------------------------------------------------------------------

std::string count_of(size_t n, const std::string& noun, const std::string& plural) {
  return fmt::format("{} {}", n, n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}

bool is_terminal(FILE* f) { return f != nullptr && ::isatty(::fileno(f)) == 1; }

Progress::Progress(std::string what, size_t total, FILE* out, bool tty)
    : what_(std::move(what)), total_(total), out_(out), tty_(tty), start_(now_s()) {
  if (tty_) draw(true);
}

double Progress::elapsed() const { return now_s() - start_; }

std::string Progress::duration(double s) {
  if (!(s >= 0)) s = 0;
  if (s < 60) return fmt::format("{:.1f} s", s);
  const auto total = static_cast<int64_t>(s + 0.5);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}h{:02}m", total / 3600, total % 3600 / 60);
}

void Progress::step(const std::string& line, bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  if (failed) ++failed_;
  if (tty_) {
    if (failed) {
      // Keep failures visible above the bar.
      std::fprintf(out_, "\r\033[K%s\n", line.c_str());
    }
    draw(failed || done_ == total_);
  } else {
    const int width = static_cast<int>(std::to_string(total_).size());
    std::fprintf(out_, "[%*zu/%zu] %s\n", width, done_, total_, line.c_str());
    std::fflush(out_);
  }
}

void Progress::draw(bool force) {
  const double t = now_s();
  if (!force && last_draw_ >= 0 && t - last_draw_ < 0.1) return;
  last_draw_ = t;
  const double el = t - start_;
  const double rate = el > 0 ? static_cast<double>(done_) / el : 0.0;
  std::string eta = "--";
  if (done_ > 0 && done_ < total_ && rate > 0) eta = duration(static_cast<double>(total_ - done_) / rate);
  if (done_ == total_) eta = "done";
  int cols = 80;
  winsize ws{};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) cols = ws.ws_col;
  const std::string tail =
      fmt::format(" {}/{} {:.2f}/s ETA {}{}", done_, total_, rate, eta, failed_ ? fmt::format(" ({} failed)", failed_) : "");
  const std::string head = what_ + " [";
  int bar = cols - 1 - static_cast<int>(head.size() + tail.size()) - 1;
  bar = std::clamp(bar, 10, 60);
  const int filled = total_ == 0 ? bar : static_cast<int>(static_cast<double>(bar) * done_ / total_);
  std::string line = head + std::string(filled, '#') + std::string(bar - filled, '.') + "]" + tail;
  std::fprintf(out_, "\r\033[K%s", line.c_str());
  std::fflush(out_);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (tty_) {
    draw(true);
    std::fprintf(out_, "\n");
    std::fflush(out_);
  }
}

// ---- ptxas ---------------------------------------------------------------------

PtxasReport parse_ptxas(const std::string& log) {
  PtxasReport r;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    size_t at = line.find("bytes spill stores");
    if (at != std::string::npos) {
      // "...  N bytes stack frame, N bytes spill stores, N bytes spill loads"
      long long frame = 0, stores = 0, loads = 0;
      const size_t start = line.find_first_of("0123456789");
      if (start != std::string::npos &&
          std::sscanf(line.c_str() + start, "%lld bytes stack frame, %lld bytes spill stores, %lld bytes spill loads",
                      &frame, &stores, &loads) == 3) {
        r.stack_frame = std::max<int64_t>(r.stack_frame, frame);
        r.spill_stores += stores;
        r.spill_loads += loads;
      }
    }
    at = line.find("Used ");
    if (at != std::string::npos && line.find(" registers") != std::string::npos) {
      int regs = 0;
      if (std::sscanf(line.c_str() + at, "Used %d registers", &regs) == 1) {
        r.found = true;
        r.registers = std::max(r.registers, regs);
      }
      const size_t sm = line.find(" bytes smem");
      if (sm != std::string::npos) {
        size_t b = sm;
        while (b > 0 && std::isdigit(static_cast<unsigned char>(line[b - 1]))) --b;
        long long smem = 0;
        if (b < sm && std::sscanf(line.c_str() + b, "%lld", &smem) == 1) r.smem_static = smem;
      }
    }
  }
  return r;
}

}  // namespace flashgen::cli
