#include "core/json_tree.h"

#include <cmath>

namespace tierflow {
namespace {

template <class Tree>
void write_tree(JsonWriter& out, const Tree& j) {
  switch (j.type()) {
    case Tree::value_t::object:
      out.begin_object(JsonLayout::kLines);
      for (const auto& [k, v] : j.items()) {
        out.key(k);
        write_tree(out, v);
      }
      out.end_object();
      break;
    case Tree::value_t::array:
      out.begin_array(JsonLayout::kLines);
      for (const auto& v : j) write_tree(out, v);
      out.end_array();
      break;
    case Tree::value_t::string:
      out.string(j.template get_ref<const std::string&>());
      break;
    case Tree::value_t::boolean:
      out.boolean(j.template get<bool>());
      break;
    case Tree::value_t::number_integer:
      out.integer(j.template get<int64_t>());
      break;
    case Tree::value_t::number_unsigned:
      out.integer(j.template get<uint64_t>());
      break;
    case Tree::value_t::number_float: {
      const double v = j.template get<double>();
      if (std::isfinite(v)) {
        out.real(v);
      } else {
        out.null();
      }
      break;
    }
    case Tree::value_t::null:
    case Tree::value_t::discarded:
    case Tree::value_t::binary:
      out.null();
      break;
  }
}

template <class Tree>
std::string document(const Tree& j) {
  std::string text;
  JsonWriter w(text);
  write_tree(w, j);
  text += '\n';
  return text;
}

}  // namespace

void write_json_tree(JsonWriter& out, const nlohmann::json& j) {
  write_tree(out, j);
}
void write_json_tree(JsonWriter& out, const nlohmann::ordered_json& j) {
  write_tree(out, j);
}
std::string json_text(const nlohmann::json& j) {
  return document(j);
}
std::string json_text(const nlohmann::ordered_json& j) {
  return document(j);
}

}  // namespace tierflow
