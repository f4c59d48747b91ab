#include "tests/job_runner.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "heterps/base/subprocess.h"

namespace heterps::testing {

using json = nlohmann::json;

const std::string kBinary = std::string(HETERPS_BINARY_DIR) + "/tools/heterps";

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/heterps_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

Outcome Heterps(const std::vector<std::string>& args, const std::string& dir,
                absl::Duration limit) {
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   absl::StrCat("exec ", kBinary, " ", absl::StrJoin(args, " "),
                                                " >", dir, "/out 2>", dir, "/err")};
  auto child = base::Subprocess::Start(argv);
  EXPECT_TRUE(child.ok()) << child.status();
  Outcome r;
  auto code = (*child)->Wait(limit);
  EXPECT_TRUE(code.ok()) << "heterps " << absl::StrJoin(args, " ") << " still running after "
                         << limit;
  r.exit_code = code.ok() ? *code : -1;
  r.out = Slurp(dir + "/out");
  r.err = Slurp(dir + "/err");
  return r;
}

json Metrics(const std::string& job_dir) {
  return json::parse(Slurp(job_dir + "/metrics.json"), nullptr, false);
}

void ExpectNoneLeft(const std::string& job_dir) {
  const json processes = json::parse(Slurp(job_dir + "/processes.json"), nullptr, false);
  ASSERT_FALSE(processes.is_discarded()) << job_dir << "/processes.json";
  for (const auto& [rank, pid] : processes["ranks"].items()) {
    EXPECT_NE(kill(pid.get<int>(), 0), 0) << "rank " << rank << " (pid " << pid << ") outlived "
                                          << "its job";
  }
}

void ExpectAllEndWithin(const std::string& job_dir, absl::Duration limit) {
  const json processes = json::parse(Slurp(job_dir + "/processes.json"), nullptr, false);
  ASSERT_FALSE(processes.is_discarded()) << job_dir << "/processes.json";
  const absl::Time deadline = absl::Now() + limit;
  for (const auto& [rank, pid] : processes["ranks"].items()) {
    auto ended = [pid = pid.get<int>()] {
      if (kill(pid, 0) != 0) return true;
      const std::string stat = Slurp(absl::StrCat("/proc/", pid, "/stat"));
      const size_t paren = stat.rfind(')');
      return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
    };
    while (!ended() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    EXPECT_TRUE(ended()) << "rank " << rank << " (pid " << pid << ") outlived its coordinator by "
                         << absl::FormatDuration(limit);
  }
}

Background::Background(const std::vector<std::string>& args, const std::string& dir) : dir_(dir) {
  auto child =
      base::Subprocess::Start({"/bin/sh", "-c",
                               absl::StrCat("exec ", kBinary, " ", absl::StrJoin(args, " "), " >",
                                            dir, "/out 2>", dir, "/err")});
  EXPECT_TRUE(child.ok()) << child.status();
  if (child.ok()) child_ = std::move(*child);
}

bool Background::WaitFor(const std::function<bool()>& done, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline && child_ != nullptr && child_->Running()) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

int Background::Wait(absl::Duration limit) {
  if (child_ == nullptr) return -1;
  auto code = child_->Wait(limit);
  return code.ok() ? *code : -1;
}

std::string Background::err() const { return Slurp(dir_ + "/err"); }

void Background::Signal(int signal) {
  if (child_ != nullptr) child_->Signal(signal);
}

int FreePort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t size = sizeof(address);
  getsockname(s, reinterpret_cast<sockaddr*>(&address), &size);
  close(s);
  return ntohs(address.sin_port);
}

int CheckpointStep(const std::string& job_dir) {
  const json checkpoint = json::parse(Slurp(job_dir + "/checkpoint.json"), nullptr, false);
  return checkpoint.is_discarded() ? -1 : checkpoint.value("step", -1);
}

json KillMidRun(const std::vector<std::string>& args, const std::string& dir, int rank, int steps) {
  return KillMidRun(args, dir, {{rank, steps}});
}

json KillMidRun(const std::vector<std::string>& args, const std::string& dir,
                const std::vector<std::pair<int, int>>& kills) {
  auto job = base::Subprocess::Start({"/bin/sh", "-c",
                                      absl::StrCat("exec ", kBinary, " ", absl::StrJoin(args, " "),
                                                   " >", dir, "/out 2>", dir, "/err")});
  EXPECT_TRUE(job.ok()) << job.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  size_t next = 0;
  while (next < kills.size() && absl::Now() < deadline && (*job)->Running()) {
    const auto [rank, steps] = kills[next];
    const json checkpoint = json::parse(Slurp(dir + "/checkpoint.json"), nullptr, false);
    const json processes = json::parse(Slurp(dir + "/processes.json"), nullptr, false);
    // A later kill waits for a checkpoint past the earlier one's: the restarted attempt's
    // processes are the ones in processes.json by then.
    if (!checkpoint.is_discarded() && checkpoint.value("step", 0) >= steps &&
        !processes.is_discarded()) {
      kill(processes["ranks"][std::to_string(rank)].get<int>(), SIGKILL);
      ++next;
      continue;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(next, kills.size()) << "the job ended before its kill " << next + 1 << ": "
                                << Slurp(dir + "/err");
  auto code = (*job)->Wait(absl::Seconds(120));
  EXPECT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << Slurp(dir + "/err");
  ExpectNoneLeft(dir);
  return Metrics(dir);
}

}  // namespace heterps::testing
