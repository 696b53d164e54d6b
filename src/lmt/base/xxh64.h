// XXH64: the 64-bit xxHash of Yann Collet, written out here (no dependency) to checksum shard files and
// checkpoint files.
// Bit-identical to the reference `XXH64(data, len, seed)`; about 10 GB/s on one core, so verifying
// a shard costs far less than reading it from disk.
//
// Xxh64 hashes a byte stream fed in pieces of any size (update() may be called with 0 bytes);
// xxh64() hashes one buffer. Neither allocates. An Xxh64 is a plain value: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lmt {

class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t size);
  uint64_t digest() const;  // of everything fed so far; the stream may continue afterwards

 private:
  uint64_t acc_[4];
  uint64_t seed_;
  uint64_t total_ = 0;
  uint8_t buffer_[32];  // the tail that does not fill a 32-byte stripe yet
  size_t buffered_ = 0;
};

uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);

// 16 lower-case hex digits (manifests print checksums this way).
std::string hex64(uint64_t value);

}  // namespace lmt
