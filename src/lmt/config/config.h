// Config: a training recipe as a flat map of dotted keys ("optim.lr") to typed values.
//
// Every key lives in one schema (schema.cpp): its type, default, valid range and one-line
// documentation. The schema drives everything else: TOML parsing, `--set section.key=value`
// overrides, defaults, range checks, the closest-key suggestion for typos, writing the resolved
// recipe, and docs/CONFIG.md (`lmtrain train --print-keys`). A key outside the schema is an error
// naming the file or flag and the closest valid key; a value outside its key's range is an error
// naming the key, the value, the range and where the value came from (the file or the flag).
// Every number (integer, number, or element of a list of numbers) must be finite and in range.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::config {

enum class Type : uint8_t { kInt, kFloat, kBool, kString, kFloatList, kStringList };
using Value = std::variant<int64_t, double, bool, std::string, std::vector<double>, std::vector<std::string>>;

// kDefault: has a default value; kRequired: the recipe must set it; kOptional: no default, unset
// unless the recipe sets it (model.* overrides of the preset's fields).
enum class Presence : uint8_t { kDefault, kRequired, kOptional };

// The valid values of a numeric key (of an integer, a number, or each element of a list of numbers):
// min <= v <= max, with `min_open` / `max_open` making that end strict. Numbers must also be finite
// (NaN and infinities are never valid). Keys of other types ignore it.
struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;

  bool contains(double v) const;
  bool bounded() const { return min != -std::numeric_limits<double>::infinity() || max != std::numeric_limits<double>::infinity(); }
  std::string text() const;  // "[1, 1e+12]", "(0, 1]", ">= 0", "> 0", "finite"
};

struct KeyInfo {
  std::string key;  // "section.name"
  Type type;
  Value default_value;
  Presence presence = Presence::kDefault;
  std::string doc;
  Range range;
};

// The schema, in documentation order.
const std::vector<KeyInfo>& schema();
// Checks `value` against the type and range of `info`; the error names `where` and the key.
Status check_value(const KeyInfo& info, const Value& value, const std::string& where);
const KeyInfo* find_key(const std::string& key);
// The schema key nearest to `key` by edit distance (for "did you mean").
std::string closest_key(const std::string& key);
std::string type_name(Type t);
std::string value_to_string(const Value& v);  // TOML syntax: 3, 0.1, true, "x", [0.5, 0.75]

class Config {
 public:
  // Defaults of every key that has one.
  static Config defaults();
  // Defaults overlaid with a TOML file; unknown keys and wrong types name the file and key.
  static StatusOr<Config> from_toml_file(const std::string& path);
  static StatusOr<Config> from_toml_string(const std::string& text, const std::string& source);

  // "section.key=value" (value in TOML syntax, strings may be bare).
  Status apply_override(const std::string& assignment);
  // Sets a key after checking its type and range; `source` (a file, or the flag) names errors and
  // is remembered as the value's origin (where()).
  Status set(const std::string& key, const Value& value, const std::string& source);
  // Overlays the keys `other` set explicitly (from its file or flags, not its defaults), with their
  // sources: `--config base.toml --config layout.toml` merges key by key, the later file winning.
  void overlay(const Config& other);
  // Every required key is set.
  Status check_complete(const std::string& source) const;

  bool has(const std::string& key) const { return values_.count(key) > 0; }
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::vector<double>& get_float_list(const std::string& key) const;
  const std::vector<std::string>& get_string_list(const std::string& key) const;

  // Where the value of `key` came from, for error messages: the file or flag that set it, or, for a
  // default, "<file> (default)" where <file> is the recipe the Config was read from.
  std::string where(const std::string& key) const;

  // The resolved recipe as TOML (sections in schema order; every key, defaults included).
  std::string to_toml() const;
  const std::map<std::string, Value>& values() const { return values_; }

 private:
  const Value& get(const std::string& key, Type type) const;
  std::map<std::string, Value> values_;
  std::map<std::string, std::string> sources_;  // key -> the file or flag that set it
  std::string origin_ = "defaults";            // the recipe file (or text) the defaults were overlaid with
};

// runtime.backend: the name of the kernel backend to compute on ("cpu", "ref"; kernels/registry.h).
// Whether the name is registered is checked where the registry is known (train::recipe_from_config).
const std::string& runtime_backend(const Config& c);

// docs/CONFIG.md's key reference, generated from the schema.
std::string schema_markdown();

}  // namespace lmt::config
