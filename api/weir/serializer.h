// Serializers: how record types cross task boundaries.
//
// Records pass between chained operators as C++ objects; only where they
// cross a task boundary (a key_by, a rebalance, a change of parallelism) are
// they written to bytes. Weir finds a type's serializer as
// weir::Serializer<T>, with two static functions:
//
//   static void Write(const T& value, std::string& out);  // appends to out
//   static T Read(std::string_view bytes);                 // one whole value
//
// Built-in: std::string, integers, double, bool, std::pair of serializable
// types. For your own types (a protobuf message, a struct) specialize
// weir::Serializer in namespace weir, or pass a serializer type explicitly
// where the API takes one; weir/protobuf_serializer.h has one for protobuf.
// Read may throw std::exception on malformed bytes; the task then fails with
// its message.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace weir {

template <typename T, typename Enable = void>
struct Serializer;  // Undefined: a record type needs a serializer.

template <>
struct Serializer<std::string> {
  static void Write(const std::string& value, std::string& out) { out.append(value); }
  static std::string Read(std::string_view bytes) { return std::string(bytes); }
};

// Fixed-width little-endian integers and floating point.
template <typename T>
struct Serializer<T, std::enable_if_t<std::is_arithmetic_v<T>>> {
  static void Write(const T& value, std::string& out) {
    char buf[sizeof(T)];
    std::memcpy(buf, &value, sizeof(T));
    out.append(buf, sizeof(T));
  }
  static T Read(std::string_view bytes) {
    if (bytes.size() != sizeof(T)) {
      throw std::runtime_error("corrupt record: expected " + std::to_string(sizeof(T)) + " bytes, got " +
                               std::to_string(bytes.size()));
    }
    T value;
    std::memcpy(&value, bytes.data(), sizeof(T));
    return value;
  }
};

namespace internal {

inline void WriteVarint(uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// 8 bytes, big-endian with the sign bit flipped: byte order is numeric
// order (keys of ordered state: timers, windows).
inline void AppendOrderedInt64(int64_t v, std::string& out) {
  const uint64_t bits = static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((bits >> (56 - 8 * i)) & 0xff));
}
// Inverse of AppendOrderedInt64 on the first 8 bytes of `in` (at least 8).
inline int64_t ReadOrderedInt64(std::string_view in) {
  uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(in[static_cast<size_t>(i)]);
  return static_cast<int64_t>(bits ^ (uint64_t{1} << 63));
}

// Reads a varint at `*pos`, advancing it; throws on truncated input.
inline uint64_t ReadVarint(std::string_view in, size_t* pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= in.size()) throw std::runtime_error("corrupt record: truncated length");
    uint8_t b = static_cast<uint8_t>(in[(*pos)++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  throw std::runtime_error("corrupt record: length too long");
}

// Reads a length-prefixed field written by WriteField.
inline std::string_view ReadField(std::string_view in, size_t* pos) {
  uint64_t n = ReadVarint(in, pos);
  if (n > in.size() - *pos) throw std::runtime_error("corrupt record: field beyond its end");
  std::string_view field = in.substr(*pos, n);
  *pos += n;
  return field;
}

template <typename T, typename S = Serializer<T>>
void WriteField(const T& value, std::string& out) {
  std::string tmp;
  S::Write(value, tmp);
  WriteVarint(tmp.size(), out);
  out.append(tmp);
}

}  // namespace internal

template <typename A, typename B>
struct Serializer<std::pair<A, B>> {
  static void Write(const std::pair<A, B>& value, std::string& out) {
    internal::WriteField(value.first, out);
    internal::WriteField(value.second, out);
  }
  static std::pair<A, B> Read(std::string_view bytes) {
    size_t pos = 0;
    A a = Serializer<A>::Read(internal::ReadField(bytes, &pos));
    B b = Serializer<B>::Read(internal::ReadField(bytes, &pos));
    return {std::move(a), std::move(b)};
  }
};

}  // namespace weir
