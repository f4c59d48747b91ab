#include "tools/region_job.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "heterps/base/file.h"
#include "heterps/base/host.h"
#include "tools/cli_common.h"
#include "tools/train_common.h"

namespace heterps::tools {

absl::StatusOr<std::unique_ptr<RegionJob>> RegionJob::Prepare(TrainFlags* flags) {
  if (flags->region.empty()) return nullptr;
  if (flags->job.mode != worker::Consistency::kSync) {
    return absl::InvalidArgumentError(
        "--region: a job across regions trains synchronously (--mode sync)");
  }
  launcher::rpc::RegionGatewayOptions o;
  for (const std::string& item : flags->region_gateways) {
    const size_t eq = item.find('=');
    const size_t colon = item.rfind(':');
    if (eq == std::string::npos || eq == 0 || colon == std::string::npos || colon < eq ||
        item.back() == ':') {
      return absl::InvalidArgumentError(absl::StrCat(
          "--region-gateways: '", item, "' is not REGION=HOST:PORT (for example eu=10.1.0.5:7100)"));
    }
    const std::string name = item.substr(0, eq);
    if (std::find(o.names.begin(), o.names.end(), name) != o.names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--region-gateways: region '", name, "' named twice"));
    }
    o.names.push_back(name);
    o.addresses.push_back(item.substr(eq + 1));
  }
  if (o.names.size() < 2) {
    return absl::InvalidArgumentError("--region-gateways: name two regions or more");
  }
  const auto self = std::find(o.names.begin(), o.names.end(), flags->region);
  if (self == o.names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("--region: '", flags->region,
                                                   "' is none of --region-gateways' regions (",
                                                   absl::StrJoin(o.names, ", "), ")"));
  }
  o.self = static_cast<int>(self - o.names.begin());
  int hub = -1;
  if (!flags->sync_hub.empty()) {
    const auto at = std::find(o.names.begin(), o.names.end(), flags->sync_hub);
    if (at == o.names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--sync-hub: '", flags->sync_hub,
                                                     "' is none of --region-gateways' regions (",
                                                     absl::StrJoin(o.names, ", "), ")"));
    }
    hub = static_cast<int>(at - o.names.begin());
  }
  if (flags->region_ca.empty() && !flags->region_plaintext) {
    for (size_t r = 0; r < o.addresses.size(); ++r) {
      const std::string host = o.addresses[r].substr(0, o.addresses[r].rfind(':'));
      if (!base::IsLoopbackHost(host)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--region-gateways: region '", o.names[r], "' is at ", o.addresses[r],
            ", off this host: the windows between regions need --region-ca, --region-cert and "
            "--region-key (mutual TLS; heterps certs makes them), or --region-plaintext to send "
            "them in the clear"));
      }
    }
  }
  // A cluster spec that knows the regions: the job's plan stays on this region's types (its
  // data is kept here), and the links' prices price what the windows send.
  absl::StatusOr<config::ClusterSpec> cluster = LoadClusterOrLocal(flags->cluster_path);
  if (!cluster.ok()) return cluster.status();
  std::map<std::pair<int, int>, double> egress;
  const std::vector<std::string> known = cluster->Regions();
  if (!known.empty()) {
    for (size_t r = 0; r < o.names.size(); ++r) {
      if (std::find(known.begin(), known.end(), o.names[r]) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--region-gateways: region '", o.names[r], "' is not a region of cluster ",
            cluster->name, " (its regions: ", absl::StrJoin(known, ", "), ")"));
      }
    }
    if (!flags->data_region.empty() && flags->data_region != flags->region) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--data-region: '", flags->data_region, "', but this job is region '", flags->region,
          "', where its data is kept"));
    }
    flags->data_region = flags->region;
    for (size_t a = 0; a < o.names.size(); ++a) {
      for (size_t b = 0; b < o.names.size(); ++b) {
        const config::RegionLink* link = a == b ? nullptr : cluster->FindLink(o.names[a], o.names[b]);
        if (link != nullptr) {
          egress[{static_cast<int>(a), static_cast<int>(b)}] = link->egress_per_byte;
        }
      }
    }
  }
  flags->job.dense_on_servers = true;
  std::unique_ptr<RegionJob> job(new RegionJob(*flags));
  job->egress_per_byte_ = std::move(egress);
  job->priced_by_ = cluster->name;
  job->gateway_options_ = std::move(o);
  job->hub_ = hub;
  return job;
}

absl::Status RegionJob::Start() {
  if (!flags_.region_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadSecret(flags_.region_token_file, "--region-token-file");
    if (!token.ok()) return token.status();
    gateway_options_.token = *token;
  }
  if (!flags_.region_ca.empty()) {
    for (const auto& [path, out] :
         {std::pair<const std::string*, std::string*>{&flags_.region_ca,
                                                      &gateway_options_.tls_ca_pem},
          {&flags_.region_cert, &gateway_options_.tls_cert_pem}}) {
      absl::StatusOr<std::string> text = base::ReadTextFile(*path);
      if (!text.ok()) return text.status();
      *out = *std::move(text);
    }
    absl::StatusOr<std::string> key = ReadSecret(flags_.region_key, "--region-key");
    if (!key.ok()) return key.status();
    gateway_options_.tls_key_pem = *std::move(key);
  }
  absl::StatusOr<std::unique_ptr<launcher::rpc::RegionGateway>> started =
      launcher::rpc::RegionGateway::Start(gateway_options_);
  if (!started.ok()) return started.status();
  gateway_ = *std::move(started);
  launcher::RegionWindowsOptions w;
  w.self = gateway_options_.self;
  w.regions = static_cast<int>(gateway_options_.names.size());
  w.names = gateway_options_.names;
  w.sync_steps = flags_.sync_steps;
  w.delay = flags_.sync_delay;
  w.threshold = static_cast<float>(flags_.sync_threshold);
  w.eager_threshold = static_cast<float>(flags_.sync_eager_threshold);
  w.timeout = absl::Seconds(flags_.sync_timeout);
  w.hub = hub_;
  windows_ = std::make_unique<launcher::RegionWindows>(w, *gateway_);
  return absl::OkStatus();
}

void RegionJob::Failed(const absl::Status& status) {
  if (gateway_ == nullptr) return;
  gateway_->Abandon(absl::StrCat("its job failed: ", status.message()));
  gateway_->Close();  // a window in flight ends now, not at its deadline
}

void RegionJob::Report(std::string* summary, nlohmann::ordered_json* metrics) const {
  if (windows_ == nullptr) return;
  RegionFigures regions;
  regions.names = gateway_options_.names;
  const bool tls = !gateway_options_.tls_ca_pem.empty();
  regions.where = absl::StrCat("this job: ", flags_.region, ", its gateway ", gateway_->address(),
                               tls ? ", mutual TLS" : ", plaintext");
  regions.windows = windows_->windows();
  regions.sync_steps = flags_.sync_steps;
  regions.steps = windows_->longest();
  regions.threshold = flags_.sync_threshold;
  regions.eager_threshold = flags_.sync_eager_threshold;
  regions.delay = flags_.sync_delay;
  regions.traffic = windows_->traffic();
  regions.hub = flags_.sync_hub;
  regions.egress_per_byte = egress_per_byte_;
  regions.priced_by = priced_by_;
  *summary += RegionsSummary(regions);
  nlohmann::ordered_json sent = nlohmann::ordered_json::object();
  for (size_t r = 0; r < regions.names.size(); ++r) {
    if (static_cast<int>(r) != gateway_options_.self) {
      sent[regions.names[r]] = gateway_->sent_bytes(static_cast<int>(r));
    }
  }
  nlohmann::ordered_json json = RegionsJson(regions, {});
  json["region"] = flags_.region;
  json["gateway_bytes_sent"] = sent;
  json["gateway_bytes_received"] = gateway_->received_bytes();
  json["gateway_tls"] = tls;
  (*metrics)["regions"] = json;
}

}  // namespace heterps::tools
