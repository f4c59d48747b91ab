#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "heterps/sched/scheduler.h"

namespace heterps::sched {

void SchedulerRegistry::Register(std::string name, std::string description, Factory factory) {
  entries_[std::move(name)] = Entry{std::move(description), std::move(factory)};
}

absl::StatusOr<std::unique_ptr<Scheduler>> SchedulerRegistry::Create(
    absl::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown scheduler '", name,
                                            "' (valid: ", absl::StrJoin(Names(), ", "), ")"));
  }
  return it->second.factory();
}

std::vector<std::string> SchedulerRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

std::string SchedulerRegistry::Description(absl::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? "" : it->second.description;
}

}  // namespace heterps::sched
