// Internal pieces of tune-file planning (runtime/tune.cpp, runtime/api.cpp),
// used by tools/flashgen and the tests.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "flashgen/flashgen.hpp"
#include "flashgen/tune.hpp"

namespace flashgen::rt {

/// find_tuned_tile(), asking `device_name` only when an entry of the class,
/// arch and profile hash exists (so plans without tune entries never touch
/// the driver).
std::optional<TunedTile> find_tuned_tile_lazy(const ProblemClass& cls, int arch, const Profile& profile,
                                              const std::function<std::string()>& device_name);

/// plan(problem, arch) with the tune entries of `device_name` ("" = ignore
/// every tune entry, with one notice for those that would match). For tools
/// that plan for a device that is not present (flashgen pregen --device).
/// InvalidArgument for a name no tune file can hold (device_name_problem).
KernelSpec plan_for_device(const AttentionProblem& problem, int arch, const std::string& device_name);

/// Why `name` cannot be a tune entry's device name ("" when it can): tune files
/// record 1 to 256 printable ASCII characters (cuDeviceGetName's names are).
std::string device_name_problem(const std::string& name);

/// `name` as notices and errors show it: quoted, bytes outside printable ASCII
/// as '?', clipped past 256 characters.
std::string shown_device_name(const std::string& name);

/// plan() without tune files: the profile's default tile.
KernelSpec plan_default(const AttentionProblem& problem, int arch);
/// plan_default() with an explicit profile instead of profile_for_arch(arch).
KernelSpec plan_default(const AttentionProblem& problem, int arch, const Profile& profile);

/// The name of the GPU current in this thread (its context's device, else
/// device 0) if its arch is `arch`; "" otherwise or without a driver. Needs no
/// context. Never throws.
std::string device_name_for_arch(int arch) noexcept;

/// Prints `line` on stderr once per process.
void tune_notice_once(const std::string& line);

/// Tests only: forget loaded tune files and printed notices.
void tune_reset_for_tests();

}  // namespace flashgen::rt
