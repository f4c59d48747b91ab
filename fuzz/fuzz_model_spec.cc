// The model spec reader (config/model_spec.h), a `data` section included, and the batch-size
// rewrite of its text.
#include "fuzz/fuzz_target.h"
#include "heterps/config/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text = heterps::fuzz::Text(data, size);
  auto spec = heterps::config::ParseModelSpec(text, "fuzz.yaml");
  if (spec.ok()) {
    auto rewritten = heterps::config::WithBatchSize(text, "fuzz.yaml", 7);
    if (rewritten.ok()) (void)heterps::config::ParseModelSpec(*rewritten, "fuzz.yaml");
    std::vector<double> ids(spec->layers.front().sparse_slots, 2.5);
    (void)heterps::config::UseMeasuredIds(ids, &*spec);
  }
  return 0;
}
