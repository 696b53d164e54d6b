// Config: a training recipe as a flat map of dotted keys ("optim.lr") to typed values.
//
// Every key lives in one schema (schema.cpp): its type, default and one-line documentation. The
// schema drives everything else: TOML parsing, `--set section.key=value` overrides, defaults,
// the closest-key suggestion for typos, writing the resolved recipe, and docs/CONFIG.md
// (`lmtrain train --print-keys`). A key outside the schema is an error naming the file or flag
// and the closest valid key.
#pragma once

#include <cstdint>
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

struct KeyInfo {
  std::string key;  // "section.name"
  Type type;
  Value default_value;
  Presence presence = Presence::kDefault;
  std::string doc;
};

// The schema, in documentation order.
const std::vector<KeyInfo>& schema();
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
  Status set(const std::string& key, const Value& value, const std::string& source);
  // Every required key is set.
  Status check_complete(const std::string& source) const;

  bool has(const std::string& key) const { return values_.count(key) > 0; }
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::vector<double>& get_float_list(const std::string& key) const;
  const std::vector<std::string>& get_string_list(const std::string& key) const;

  // The resolved recipe as TOML (sections in schema order; every key, defaults included).
  std::string to_toml() const;
  const std::map<std::string, Value>& values() const { return values_; }

 private:
  const Value& get(const std::string& key, Type type) const;
  std::map<std::string, Value> values_;
};

// docs/CONFIG.md's key reference, generated from the schema.
std::string schema_markdown();

}  // namespace lmt::config
