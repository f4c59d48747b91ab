// The cluster spec reader (config/cluster_spec.h).
#include "fuzz/fuzz_target.h"
#include "heterps/config/cluster_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)heterps::config::ParseClusterSpec(heterps::fuzz::Text(data, size), "fuzz.yaml");
  return 0;
}
