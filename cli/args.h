// Command-line options for the minfer subcommands, one rule for every command: options are
// declared up front, so an unknown option, a missing value, a repeated option (unless declared
// repeatable), a number out of range or a list with an empty item is refused with one line
// naming the option.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace minfer::cli {

struct Option {
  std::string names;  // "-m,--model": every spelling, comma-separated; the last is canonical
  std::string value;  // placeholder for the value ("MODEL"); empty for a flag
  std::string help;
  bool repeatable = false;  // may be given several times (get_all)
};

class Args {
 public:
  Args(std::string command, std::string summary, std::vector<Option> options);
  // Parses argv[first..argc); throws Error on anything it does not recognise.
  void parse(int argc, char** argv, int first);
  bool help_requested() const { return help_; }
  std::string usage() const;

  bool declared(const std::string& name) const { return find(name) != nullptr; }
  bool has(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> get_all(const std::string& name) const;  // a repeatable option
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double get_double(const std::string& name, double fallback, double min, double max) const;

 private:
  const Option* find(const std::string& spelling) const;
  std::string canonical(const std::string& name) const;
  std::string command_, summary_;
  std::vector<Option> options_;
  std::map<std::string, std::vector<std::string>> values_;
  bool help_ = false;
};

// Parses an integer, or throws Error naming `what`.
int64_t parse_int(const std::string& text, const std::string& what, int64_t min, int64_t max);
double parse_double(const std::string& text, const std::string& what, double min, double max);
// "1,4,16" or "1-8" or "1,2,4-6": a comma list of values and inclusive ranges.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what, int64_t min,
                                    int64_t max);
// "f32,bf16": a comma list of words; an empty list or item ("", "f32,", "a,,b") is an error.
std::vector<std::string> parse_list(const std::string& text, const std::string& what);

}  // namespace minfer::cli
