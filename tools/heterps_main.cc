// The heterps command line.
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "heterps/base/host.h"
#include "tools/certs_command.h"
#include "tools/convert_command.h"
#include "tools/ctl_command.h"
#include "tools/gen_data_command.h"
#include "tools/node_command.h"
#include "tools/plan_command.h"
#include "tools/profile_command.h"
#include "tools/ps_server_command.h"
#include "tools/status_command.h"
#include "tools/train_command.h"

int main(int argc, char** argv) {
  // Every role's RPC buffers stay in the heap instead of being mapped and faulted in per call.
  heterps::base::KeepFreedBuffers();
  // Debian's abseil checks every Mutex acquisition for lock-order cycles; a release binary
  // does not pay for that.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"heterps: plan and train sparse deep-learning models on heterogeneous hardware"};
  app.require_subcommand(1);
  heterps::tools::PlanFlags plan_flags;
  CLI::App* plan = heterps::tools::AddPlanCommand(app, plan_flags);
  heterps::tools::GenDataFlags gen_data_flags;
  CLI::App* gen_data = heterps::tools::AddGenDataCommand(app, gen_data_flags);
  heterps::tools::ConvertFlags convert_flags;
  CLI::App* convert = heterps::tools::AddConvertCommand(app, convert_flags);
  heterps::tools::TrainFlags train_flags;
  CLI::App* train = heterps::tools::AddTrainCommand(app, train_flags);
  heterps::tools::ProfileFlags profile_flags;
  CLI::App* profile = heterps::tools::AddProfileCommand(app, profile_flags);
  heterps::tools::PsServerFlags ps_server_flags;
  CLI::App* ps_server = heterps::tools::AddPsServerCommand(app, ps_server_flags);
  heterps::tools::NodeFlags node_flags;
  CLI::App* node = heterps::tools::AddNodeCommand(app, node_flags);
  heterps::tools::StatusFlags status_flags;
  CLI::App* status = heterps::tools::AddStatusCommand(app, status_flags);
  heterps::tools::CtlFlags ctl_flags;
  CLI::App* ctl = heterps::tools::AddCtlCommand(app, ctl_flags);
  heterps::tools::CertsFlags certs_flags;
  CLI::App* certs = heterps::tools::AddCertsCommand(app, certs_flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "heterps: error: " << e.what() << " (see heterps --help)\n";
    return 2;
  }
  if (plan->parsed()) return heterps::tools::RunPlan(plan_flags);
  if (profile->parsed()) return heterps::tools::RunProfile(profile_flags);
  if (train->parsed()) return heterps::tools::RunTrain(train_flags);
  if (gen_data->parsed()) return heterps::tools::RunGenData(gen_data_flags);
  if (convert->parsed()) return heterps::tools::RunConvert(convert_flags);
  if (ps_server->parsed()) return heterps::tools::RunPsServer(ps_server_flags);
  if (node->parsed()) return heterps::tools::RunNode(node_flags);
  if (status->parsed()) return heterps::tools::RunStatus(status_flags);
  if (ctl->parsed()) return heterps::tools::RunCtl(ctl_flags);
  if (certs->parsed()) return heterps::tools::RunCerts(certs_flags);
  return 2;
}
