#include "cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace minfer::cli {

namespace {
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}
}  // namespace

Args::Args(std::string command, std::string summary, std::vector<Option> options)
    : command_(std::move(command)), summary_(std::move(summary)), options_(std::move(options)) {}

const Option* Args::find(const std::string& spelling) const {
  for (const auto& o : options_)
    for (const auto& n : split(o.names, ','))
      if (n == spelling) return &o;
  return nullptr;
}

std::string Args::canonical(const std::string& name) const {
  const Option* o = find(name);
  MINFER_CHECK(o != nullptr, "internal: option ", name, " is not declared for ", command_);
  return split(o->names, ',').back();
}

void Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    const Option* o = find(arg);
    if (o == nullptr) fail(command_, ": unknown option '", arg, "' (see minfer ", command_, " --help)");
    const std::string name = split(o->names, ',').back();
    MINFER_CHECK(o->repeatable || values_.count(name) == 0, command_, ": option ", arg, " is given twice");
    if (o->value.empty()) {
      MINFER_CHECK(!inline_value, command_, ": option ", arg, " takes no value");
      values_[name].push_back("1");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) fail(command_, ": option ", arg, " needs a value (", o->value, ")");
      value = argv[++i];
    }
    values_[name].push_back(value);
  }
}

std::string Args::usage() const {
  std::ostringstream out;
  out << "usage: minfer " << command_ << " [options]\n" << summary_ << "\n\noptions:\n";
  for (const auto& o : options_) {
    std::string left = "  " + o.names;
    for (auto& c : left)
      if (c == ',') c = ' ';
    if (!o.value.empty()) left += " " + o.value;
    out << left << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << o.help << "\n";
  }
  return out.str();
}

bool Args::has(const std::string& name) const { return values_.count(canonical(name)) > 0; }

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(canonical(name));
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  auto it = values_.find(canonical(name));
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  return has(name) ? parse_int(get(name), canonical(name), min, max) : fallback;
}

double Args::get_double(const std::string& name, double fallback, double min, double max) const {
  return has(name) ? parse_double(get(name), canonical(name), min, max) : fallback;
}

int64_t parse_int(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE)
    fail(what, ": '", text, "' is not an integer");
  if (v < min || v > max) fail(what, ": ", v, " is outside [", min, ", ", max, "]");
  return v;
}

double parse_double(const std::string& text, const std::string& what, double min, double max) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    fail(what, ": '", text, "' is not a number");
  if (v < min || v > max) fail(what, ": ", v, " is outside [", min, ", ", max, "]");
  return v;
}

std::vector<std::string> parse_list(const std::string& text, const std::string& what) {
  MINFER_CHECK(!text.empty(), what, ": empty list");
  std::vector<std::string> items;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    MINFER_CHECK(!item.empty(), what, ": '", text, "' has an empty item");
    items.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what, int64_t min,
                                    int64_t max) {
  std::vector<int64_t> values;
  for (const auto& part : parse_list(text, what)) {
    auto dash = part.find('-', 1);
    if (dash == std::string::npos) {
      values.push_back(parse_int(part, what, min, max));
      continue;
    }
    int64_t lo = parse_int(part.substr(0, dash), what, min, max);
    int64_t hi = parse_int(part.substr(dash + 1), what, min, max);
    MINFER_CHECK(lo <= hi && hi - lo < 4096, what, ": bad range '", part, "'");
    for (int64_t v = lo; v <= hi; ++v) values.push_back(v);
  }
  MINFER_CHECK(!values.empty(), what, ": empty list");
  return values;
}

}  // namespace minfer::cli
