// One region of a run across regions, as `heterps train --region R --region-gateways ...` runs
// it (docs/regions.md, "GEO across processes"): the flags checked and the job's settings set for
// it, this region's gateway and windows, and what the summary and the metrics say of them.
//
//   HETERPS_ASSIGN_OR_RETURN(auto region, RegionJob::Prepare(&flags));  // null: one region
//   HETERPS_RETURN_IF_ERROR(region->Start());  // the gateway listens
//   options.regions = region->windows();
//   ... RunJob ...; on failure region->Failed(status); else region->Report(&summary, &metrics);
//
// Thread safety: one thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heterps/launcher/region_windows.h"
#include "heterps/launcher/rpc/region_gateway.h"
#include "nlohmann/json.hpp"
#include "tools/train_command.h"

namespace heterps::tools {

class RegionJob {
 public:
  // Null without --region. Checks --region, --region-gateways and the job's mode (InvalidArgument
  // naming the flag), and sets what a region's job needs: its dense parameters on the servers
  // (the windows carry what the servers hold), no restarts (the other regions go on without a
  // failed one) and, where the job's cluster spec names regions, its plan on this region's
  // types (--data-region: its data is kept here) and the links' egress prices for the report.
  static absl::StatusOr<std::unique_ptr<RegionJob>> Prepare(TrainFlags* flags);
  // Reads --region-token-file and starts the gateway.
  absl::Status Start();
  launcher::RegionWindows* windows() { return windows_.get(); }
  // Tells the other regions this job failed.
  void Failed(const absl::Status& status);
  // The regions' lines of the summary, and the metrics' "regions".
  void Report(std::string* summary, nlohmann::ordered_json* metrics) const;

 private:
  explicit RegionJob(const TrainFlags& flags) : flags_(flags) {}
  const TrainFlags flags_;
  launcher::rpc::RegionGatewayOptions gateway_options_;
  int hub_ = -1;  // --sync-hub's index; -1: peer to peer
  // USD per byte of each link between the regions, where the job's cluster spec has them.
  std::map<std::pair<int, int>, double> egress_per_byte_;
  std::string priced_by_;
  std::unique_ptr<launcher::rpc::RegionGateway> gateway_;
  std::unique_ptr<launcher::RegionWindows> windows_;
};

}  // namespace heterps::tools
