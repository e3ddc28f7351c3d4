#include "planner/reproducer.h"

#include "core/json_writer.h"

namespace tierflow::planner {

std::string reproducer_json(const Reproducer& r) {
  std::string out;
  JsonWriter w(out);
  w.begin_object(JsonLayout::kLines);
  w.key("format").string("tierflow.reproducer/1");
  w.key("workload").string(r.workload);
  w.key("workload_sha256").string(r.workload_sha256);
  w.key("topology").string(r.topology);
  w.key("pipeline").string(r.pipeline);
  w.key("budget").integer(r.budget);
  w.key("failure").string(r.failure);
  w.end_object();
  out += '\n';
  return out;
}

}  // namespace tierflow::planner
