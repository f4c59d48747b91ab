#include "heterps/ps/ps_client.h"

namespace heterps::ps {

std::vector<Ticket> PsClient::PullDenseBlocks(int table, absl::Span<const DensePull> blocks) {
  std::vector<Ticket> tickets;
  for (const DensePull& b : blocks) tickets.push_back(PullDense(table, b.block, b.values));
  return tickets;
}

std::vector<Ticket> PsClient::PushDenseBlocks(int table, absl::Span<const DensePush> blocks) {
  std::vector<Ticket> tickets;
  for (const DensePush& b : blocks) tickets.push_back(PushDense(table, b.block, b.grads));
  return tickets;
}

}  // namespace heterps::ps
