#include "checkpoint/names.hpp"

namespace fsdp::ckpt {

std::string optimizer_path(std::size_t k) {
  return std::string(kOptimizersGroup) + "/" + std::to_string(k);
}

std::string optimizer_group_path(std::size_t k, std::size_t g) {
  return optimizer_path(k) + "/groups/" + std::to_string(g);
}

std::string state_path(std::size_t k, const std::string& state) {
  return optimizer_path(k) + "/" + state;
}

std::string escape_name(const std::string& name) {
  if (name == ".") return "%2E";
  if (name == "..") return "%2E%2E";
  std::string out;
  for (char c : name) {
    if (c == '%')
      out += "%25";
    else if (c == '/')
      out += "%2F";
    else
      out += c;
  }
  return out;
}

std::string unescape_name(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const std::string code = s.substr(i + 1, 2);
      if (code == "25" || code == "2F" || code == "2E") {
        out += code == "25" ? '%' : code == "2F" ? '/' : '.';
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

}  // namespace fsdp::ckpt
