#include "tests/job_runner.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
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

namespace {

// This run's directories: beside another run of the same tests on the machine (a second build's
// suite, CI), each has its own, so that neither reads the other's processes.json.
const std::string& RunRoot() {
  static const std::string root = absl::StrCat(::testing::TempDir(), "/heterps_test_", getpid());
  return root;
}

// Removes this run's directories at the end when every test passed (a failure's are kept).
class RemoveRunRoot : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Failed()) {
      std::error_code ignored;
      std::filesystem::remove_all(RunRoot(), ignored);
    }
  }
};
const ::testing::Environment* const kRemoveRunRoot =
    ::testing::AddGlobalTestEnvironment(new RemoveRunRoot);

// Whether `pid` has ended: gone, or a zombie not yet reaped.
bool Ended(int pid) {
  if (kill(pid, 0) != 0) return true;
  const std::string stat = Slurp(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

}  // namespace

std::string Dir(const std::string& name) {
  const std::string dir = RunRoot() + "/" + name;
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
    EXPECT_TRUE(Ended(pid.get<int>())) << "rank " << rank << " (pid " << pid << ") outlived "
                                       << "its job";
  }
}

void ExpectAllEndWithin(const std::string& job_dir, absl::Duration limit) {
  const json processes = json::parse(Slurp(job_dir + "/processes.json"), nullptr, false);
  ASSERT_FALSE(processes.is_discarded()) << job_dir << "/processes.json";
  const absl::Time deadline = absl::Now() + limit;
  for (const auto& [rank, pid] : processes["ranks"].items()) {
    auto ended = [pid = pid.get<int>()] { return Ended(pid); };
    while (!ended() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    EXPECT_TRUE(ended()) << "rank " << rank << " (pid " << pid << ") outlived its coordinator by "
                         << absl::FormatDuration(limit);
  }
}

Background::Background(const std::vector<std::string>& args, const std::string& dir,
                       const std::vector<std::string>& prefix)
    : dir_(dir) {
  auto child = base::Subprocess::Start(
      {"/bin/sh", "-c",
       absl::StrCat("exec ", absl::StrJoin(prefix, " "), prefix.empty() ? "" : " ", kBinary, " ",
                    absl::StrJoin(args, " "), " >", dir, "/out 2>", dir, "/err")});
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

namespace {

// `heterps args...` started in the background, its outputs into <dir>/out and <dir>/err.
absl::StatusOr<std::unique_ptr<base::Subprocess>> StartJob(const std::vector<std::string>& args,
                                                           const std::string& dir) {
  return base::Subprocess::Start({"/bin/sh", "-c",
                                  absl::StrCat("exec ", kBinary, " ", absl::StrJoin(args, " "),
                                               " >", dir, "/out 2>", dir, "/err")});
}

// Waits for the job to end: exit 0, no process left; its metrics.
json FinishJob(base::Subprocess& job, const std::string& dir) {
  auto code = job.Wait(absl::Seconds(120));
  EXPECT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << Slurp(dir + "/err");
  ExpectNoneLeft(dir);
  return Metrics(dir);
}

// The pid of rank `rank` in <dir>/processes.json (-1 if it cannot be read).
int RankPid(const std::string& dir, int rank) {
  const json processes = json::parse(Slurp(dir + "/processes.json"), nullptr, false);
  if (processes.is_discarded() || !processes.contains("ranks")) return -1;
  return processes["ranks"].value(std::to_string(rank), -1);
}

}  // namespace

json KillInSave(const std::vector<std::string>& args, const std::string& dir, int shard, int step,
                bool* tmp_left) {
  *tmp_left = false;
  auto job = StartJob(args, dir);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return json();
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  // The shard's checkpoint root (<dir>/ps-<shard>/checkpoints/<job id>) appears with its first
  // checkpoint.
  const std::string checkpoints = absl::StrCat(dir, "/ps-", shard, "/checkpoints");
  std::string root;
  while (root.empty() && absl::Now() < deadline && (*job)->Running()) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(checkpoints, error)) {
      if (entry.is_directory()) root = entry.path().string();
    }
    if (root.empty()) absl::SleepFor(absl::Milliseconds(2));
  }
  const int fd = inotify_init1(IN_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_GE(inotify_add_watch(fd, root.c_str(), IN_CREATE), 0) << root;
  const int pid = RankPid(dir, shard + 1);
  EXPECT_GT(pid, 0);
  const std::string prefix = absl::StrCat(".ckpt-", step, ".tmp-");
  std::string tmp;
  while (tmp.empty() && absl::Now() < deadline && (*job)->Running()) {
    pollfd ready{fd, POLLIN, 0};
    if (poll(&ready, 1, 100) <= 0) continue;
    alignas(inotify_event) char events[4096];
    const ssize_t n = read(fd, events, sizeof(events));
    for (ssize_t at = 0; at < n && tmp.empty();) {
      const auto* event = reinterpret_cast<const inotify_event*>(events + at);
      if (event->len > 0 && absl::StartsWith(event->name, prefix)) {
        kill(pid, SIGKILL);
        tmp = root + "/" + event->name;
      }
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
    }
  }
  close(fd);
  EXPECT_FALSE(tmp.empty()) << "the job ended before shard " << shard << " saved step " << step
                            << ": " << Slurp(dir + "/err");
  // Long before the restarted shard's next save would remove it.
  absl::SleepFor(absl::Milliseconds(50));
  *tmp_left = !tmp.empty() && std::filesystem::exists(tmp);
  return FinishJob(**job, dir);
}

json KillMidRun(const std::vector<std::string>& args, const std::string& dir,
                const std::vector<std::pair<int, int>>& kills) {
  auto job = StartJob(args, dir);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return json();
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  size_t next = 0;
  while (next < kills.size() && absl::Now() < deadline && (*job)->Running()) {
    const auto [rank, steps] = kills[next];
    const json checkpoint = json::parse(Slurp(dir + "/checkpoint.json"), nullptr, false);
    // A later kill waits for a checkpoint past the earlier one's: the restarted attempt's
    // processes are the ones in processes.json by then.
    const int pid = RankPid(dir, rank);
    if (!checkpoint.is_discarded() && checkpoint.value("step", 0) >= steps && pid > 0) {
      kill(pid, SIGKILL);
      ++next;
      continue;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(next, kills.size()) << "the job ended before its kill " << next + 1 << ": "
                                << Slurp(dir + "/err");
  return FinishJob(**job, dir);
}

}  // namespace heterps::testing
