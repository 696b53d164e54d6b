#include "lmt/config/config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <toml++/toml.h>

namespace lmt::config {
namespace {

std::string describe(const toml::node& n) {
  std::ostringstream s;
  if (n.is_table()) return "a table";
  if (n.is_string()) return "the string \"" + n.value<std::string>().value_or("") + "\"";
  n.visit([&](const auto& x) { s << x; });
  return (n.is_array() ? "an array " : "") + s.str();
}

std::string example(const KeyInfo& info);

// Converts a TOML node to the key's type; the error names `where` (file or flag) and the key.
StatusOr<Value> convert(const toml::node& n, const KeyInfo& info, const std::string& where) {
  auto wrong = [&] {
    const std::string t = type_name(info.type);
    const std::string article = (t[0] == 'i') ? "an " : "a ";
    return InvalidArgument(where + ": key '" + info.key + "' must be " + article + t + ", got " + describe(n), example(info));
  };
  switch (info.type) {
    case Type::kInt:
      if (auto v = n.as_integer()) return Value(static_cast<int64_t>(v->get()));
      return wrong();
    case Type::kFloat:
      if (auto v = n.as_floating_point()) return Value(v->get());
      if (auto v = n.as_integer()) return Value(static_cast<double>(v->get()));
      return wrong();
    case Type::kBool:
      if (auto v = n.as_boolean()) return Value(v->get());
      return wrong();
    case Type::kString:
      if (auto v = n.as_string()) return Value(v->get());
      return wrong();
    case Type::kFloatList: {
      const toml::array* a = n.as_array();
      if (!a) return wrong();
      std::vector<double> out;
      for (const auto& e : *a) {
        if (auto f = e.as_floating_point()) out.push_back(f->get());
        else if (auto i = e.as_integer()) out.push_back(static_cast<double>(i->get()));
        else return wrong();
      }
      return Value(out);
    }
    case Type::kStringList: {
      const toml::array* a = n.as_array();
      if (!a) return wrong();
      std::vector<std::string> out;
      for (const auto& e : *a) {
        if (auto s = e.as_string()) out.push_back(s->get());
        else return wrong();
      }
      return Value(out);
    }
  }
  return wrong();
}

std::string example(const KeyInfo& info) {
  return info.key + " = " + (info.presence == Presence::kDefault ? value_to_string(info.default_value) : "...") + "  # " +
         info.doc;
}

std::string number_string(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

Status out_of_range(const KeyInfo& info, const std::string& what, double v, const std::string& where) {
  const std::string range = info.range.text();
  const bool interval = range[0] == '[' || range[0] == '(';
  const std::string why = std::isfinite(v) ? " is out of range: it must be " + std::string(interval ? "in " : "") + range
                                           : std::string(" is not a finite number");
  return InvalidArgument(where + ": " + what + " = " + number_string(v) + why,
                         "valid range of " + info.key + (info.type == Type::kFloatList ? " elements" : "") + ": " + range +
                             "; e.g. " + example(info));
}

Status unknown_key(const std::string& where, const std::string& key) {
  return InvalidArgument(where + ": unknown key '" + key + "'",
                         "did you mean '" + closest_key(key) + "'? (`lmtrain train --print-keys` lists every key)");
}

// Flattens nested tables into dotted keys and sets each leaf.
Status apply_table(Config& c, const toml::table& t, const std::string& prefix, const std::string& where) {
  for (const auto& [k, node] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = node.as_table()) {
      LMT_RETURN_IF_ERROR(apply_table(c, *sub, key, where));
      continue;
    }
    const KeyInfo* info = find_key(key);
    if (!info) return unknown_key(where, key);
    LMT_ASSIGN_OR_RETURN(Value v, convert(node, *info, where));
    LMT_RETURN_IF_ERROR(c.set(key, v, where));
  }
  return Status::Ok();
}

// toml++ as Debian builds it reports syntax errors by exception; it is caught here, never escapes.
StatusOr<toml::table> parse(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return InvalidArgument(msg.str(), "see https://toml.io for the syntax; keys look like `lr = 3e-4` under `[optim]`");
  }
}

}  // namespace

Status check_value(const KeyInfo& info, const Value& value, const std::string& where) {
  const bool type_ok = std::visit([&](const auto& x) {
    using V = std::decay_t<decltype(x)>;
    switch (info.type) {
      case Type::kInt: return std::is_same_v<V, int64_t>;
      case Type::kFloat: return std::is_same_v<V, double>;
      case Type::kBool: return std::is_same_v<V, bool>;
      case Type::kString: return std::is_same_v<V, std::string>;
      case Type::kFloatList: return std::is_same_v<V, std::vector<double>>;
      case Type::kStringList: return std::is_same_v<V, std::vector<std::string>>;
    }
    return false;
  }, value);
  if (!type_ok)
    return InvalidArgument(where + ": key '" + info.key + "' must be of type " + type_name(info.type) + ", got " +
                               value_to_string(value),
                           example(info));
  const std::string key = "key '" + info.key + "'";
  if (const auto* i = std::get_if<int64_t>(&value)) {
    if (!info.range.contains(static_cast<double>(*i))) return out_of_range(info, key, static_cast<double>(*i), where);
  } else if (const auto* f = std::get_if<double>(&value)) {
    if (!info.range.contains(*f)) return out_of_range(info, key, *f, where);
  } else if (const auto* l = std::get_if<std::vector<double>>(&value)) {
    for (size_t e = 0; e < l->size(); ++e)
      if (!info.range.contains((*l)[e]))
        return out_of_range(info, "element " + std::to_string(e) + " of " + key, (*l)[e], where);
  }
  return Status::Ok();
}

std::string value_to_string(const Value& v) {
  std::ostringstream s;
  s.precision(10);
  std::visit([&](const auto& x) {
    using V = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<V, bool>) s << (x ? "true" : "false");
    else if constexpr (std::is_same_v<V, std::string>) s << toml::value<std::string>(x);
    else if constexpr (std::is_same_v<V, double>) s << toml::value<double>(x);
    else if constexpr (std::is_same_v<V, int64_t>) s << x;
    else {
      s << "[";
      for (size_t i = 0; i < x.size(); ++i) {
        if (i) s << ", ";
        if constexpr (std::is_same_v<V, std::vector<double>>) s << toml::value<double>(x[i]);
        else s << toml::value<std::string>(x[i]);
      }
      s << "]";
    }
  }, v);
  return s.str();
}

Config Config::defaults() {
  Config c;
  for (const auto& i : schema())
    if (i.presence == Presence::kDefault) c.values_[i.key] = i.default_value;
  return c;
}

StatusOr<Config> Config::from_toml_string(const std::string& text, const std::string& source) {
  LMT_ASSIGN_OR_RETURN(toml::table t, parse(text, source));
  Config c = defaults();
  c.origin_ = source;
  LMT_RETURN_IF_ERROR(apply_table(c, t, "", source));
  return c;
}

StatusOr<Config> Config::from_toml_file(const std::string& path) {
  const char* hint = "pass --config configs/<recipe>.toml";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return NotFound("cannot read config file '" + path + "': " + std::strerror(errno), hint);
  if (S_ISDIR(st.st_mode))
    return InvalidArgument("config file '" + path + "' is a directory, not a TOML recipe", hint);
  // Pipes (--config <(...)) are read as they come; regular files must be of a recipe's size.
  if (S_ISREG(st.st_mode) && st.st_size > (int64_t{64} << 20))
    return InvalidArgument("config file '" + path + "' is " + std::to_string(st.st_size >> 20) +
                               " MiB: too large for a recipe (the limit is 64 MiB)",
                           hint);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return NotFound("cannot read config file '" + path + "': " + std::strerror(errno), hint);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= (size_t{64} << 20)) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return IoError("cannot read config file '" + path + "'", hint);
  if (text.size() > (size_t{64} << 20))
    return InvalidArgument("config file '" + path + "' is larger than 64 MiB: too large for a recipe", hint);
  return from_toml_string(text, path);
}

Status Config::set(const std::string& key, const Value& value_in, const std::string& source) {
  const KeyInfo* info = find_key(key);
  if (!info) return unknown_key(source, key);
  Value value = value_in;
  if (info->type == Type::kFloat && std::holds_alternative<int64_t>(value))
    value = static_cast<double>(std::get<int64_t>(value));
  LMT_RETURN_IF_ERROR(check_value(*info, value, source));
  values_[key] = std::move(value);
  sources_[key] = source;
  return Status::Ok();
}

void Config::overlay(const Config& other) {
  for (const auto& [k, src] : other.sources_) {
    values_[k] = other.values_.at(k);
    sources_[k] = src;
  }
}

const std::string& runtime_backend(const Config& c) { return c.get_string("runtime.backend"); }

std::string Config::where(const std::string& key) const {
  auto it = sources_.find(key);
  if (it != sources_.end()) return it->second;
  return origin_ + " (default)";
}

Status Config::apply_override(const std::string& assignment) {
  const std::string where = "--set " + assignment;
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    return InvalidArgument(where + ": expected section.key=value", "e.g. --set optim.lr=3e-4");
  const std::string key = assignment.substr(0, eq), raw = assignment.substr(eq + 1);
  const KeyInfo* info = find_key(key);
  if (!info) return unknown_key("--set", key);
  StatusOr<toml::table> parsed = parse("v = " + raw, where);
  if (!parsed.ok() && info->type == Type::kString) return set(key, Value(raw), where);  // a bare string
  if (!parsed.ok())
    return InvalidArgument(where + ": cannot read '" + raw + "' as: " + type_name(info->type),
                           "e.g. --set " + key + "=" +
                               (info->presence == Presence::kDefault ? value_to_string(info->default_value) : "..."));
  const toml::node* node = parsed->get("v");
  StatusOr<Value> v = convert(*node, *info, where);
  if (!v.ok() && info->type == Type::kString) return set(key, Value(raw), where);
  if (!v.ok()) return v.status();
  return set(key, *v, where);
}

Status Config::check_complete(const std::string& source) const {
  for (const auto& i : schema())
    if (i.presence == Presence::kRequired && !has(i.key))
      return InvalidArgument(source + ": required key '" + i.key + "' is not set", i.key + " = ...  # " + i.doc);
  return Status::Ok();
}

const Value& Config::get(const std::string& key, Type type) const {
  const KeyInfo* info = find_key(key);
  LMT_CHECK(info != nullptr) << "config key '" << key << "' is not in the schema";
  LMT_CHECK(info->type == type) << "config key '" << key << "' is a " << type_name(info->type) << ", read as " << type_name(type);
  auto it = values_.find(key);
  LMT_CHECK(it != values_.end()) << "config key '" << key << "' is not set (check has() first)";
  return it->second;
}

int64_t Config::get_int(const std::string& k) const { return std::get<int64_t>(get(k, Type::kInt)); }
double Config::get_float(const std::string& k) const { return std::get<double>(get(k, Type::kFloat)); }
bool Config::get_bool(const std::string& k) const { return std::get<bool>(get(k, Type::kBool)); }
const std::string& Config::get_string(const std::string& k) const { return std::get<std::string>(get(k, Type::kString)); }
const std::vector<double>& Config::get_float_list(const std::string& k) const {
  return std::get<std::vector<double>>(get(k, Type::kFloatList));
}
const std::vector<std::string>& Config::get_string_list(const std::string& k) const {
  return std::get<std::vector<std::string>>(get(k, Type::kStringList));
}

std::string Config::to_toml() const {
  std::string out = "# Resolved lmtrain recipe: every key, defaults included.\n";
  std::string section;
  for (const auto& i : schema()) {
    auto it = values_.find(i.key);
    if (it == values_.end()) continue;
    const std::string sec = i.key.substr(0, i.key.find('.'));
    if (sec != section) {
      section = sec;
      out += "\n[" + sec + "]\n";
    }
    out += i.key.substr(sec.size() + 1) + " = " + value_to_string(it->second) + "\n";
  }
  return out;
}

}  // namespace lmt::config
