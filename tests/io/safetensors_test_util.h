// Helpers for the safetensors tests: a scratch directory per test and hand-built file bytes.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/files.h"

namespace lmt::io::testing {

using lmt::test::read_bytes;
using lmt::test::ScratchDirTest;
using lmt::test::write_bytes;

// 8-byte little-endian length field with an arbitrary value.
inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file whose length field matches `header`, followed by `data_bytes` bytes of 0x11.
inline std::string make_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x11');
}

}  // namespace lmt::io::testing
