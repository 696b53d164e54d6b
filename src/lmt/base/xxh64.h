// XXH64: the 64-bit xxHash of Yann Collet, to checksum shard files and checkpoint files. A thin
// wrapper over Debian's libxxhash (libxxhash-dev, `XXH64_*`): the checksums stored in existing shard
// and checkpoint files are the reference `XXH64(data, len, seed)`, so they stay valid. About 10 GB/s
// on one core, so verifying a shard costs far less than reading it from disk.
//
// Xxh64 hashes a byte stream fed in pieces of any size (update() may be called with 0 bytes);
// xxh64() hashes one buffer. Neither allocates. An Xxh64 is a plain value (copyable; a copy continues
// independently): one thread at a time. libxxhash's XXH64_state_t lives in its bytes, so this header
// does not include <xxhash.h>.
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
  // libxxhash's XXH64_state_t (88 bytes in 0.8; xxh64.cpp checks the size and alignment at compile time).
  static constexpr size_t kStateBytes = 88;
  alignas(8) unsigned char state_[kStateBytes];
};

uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);

// 16 lower-case hex digits (manifests print checksums this way).
std::string hex64(uint64_t value);

}  // namespace lmt
