// libflashgen — the version of the code generator.
#pragma once

namespace flashgen {

/// Version of the code generator; part of every cache key and of the comment
/// every generated source begins with.
inline constexpr const char* kGeneratorVersion = "0.4.0";

}  // namespace flashgen
