// Internal to lmt_io (input_stream.cpp): the gzip (zlib) and zstd (libzstd) streams behind
// open_input(). Each owns `fd` (closed on destruction) and reads it from its start.
#pragma once

#include <memory>
#include <string>

#include "lmt/io/input_stream.h"

namespace lmt::io::internal {

std::unique_ptr<InputStream> make_plain_stream(int fd, std::string path);
std::unique_ptr<InputStream> make_gzip_stream(int fd, std::string path);
std::unique_ptr<InputStream> make_zstd_stream(int fd, std::string path);

}  // namespace lmt::io::internal
