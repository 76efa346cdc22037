#pragma once

namespace weir {

// The version of the Weir runtime, reported by every daemon and the client.
inline constexpr const char kWeirVersion[] = "0.1.0";

}  // namespace weir
