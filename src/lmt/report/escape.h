// Escaping text for HTML and SVG: every string that comes from a run (config text, labels, paths,
// event notes) passes through html_escape before it lands in the report.
#pragma once

#include <string>
#include <string_view>

namespace lmt::report {

// & < > " ' as entities; the result is safe in element content and in quoted attribute values.
std::string html_escape(std::string_view text);
// A relative file path as a URL path: bytes other than [A-Za-z0-9/._~-] are %XX-encoded, so a
// directory named "a #1" or "x?y" still links to itself.
std::string url_path_escape(std::string_view path);

}  // namespace lmt::report
