// run_subprocess: no shell, output captured, time limit kills the whole process group, and
// nothing outlives a parent killed with SIGKILL.
#include "coil/backend/common/subprocess.h"
#include "temp_dir.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
using coil::backend::quote_command;
using coil::backend::run_subprocess;
using coil::backend::split_words;

using coil::test_support::TempDir;

void write_script(const fs::path& p, const std::string& body) {
  std::ofstream(p) << "#!/bin/sh\n" << body;
  chmod(p.c_str(), 0700);
}

bool alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// The pids a script wrote ("$$ $!"), waiting for the file up to 10 s.
std::vector<pid_t> read_pids(const fs::path& f) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 1000 && pids.size() < 2; ++i) {
    pids.clear();
    std::ifstream in(f);
    pid_t p;
    while (in >> p) pids.push_back(p);
    if (pids.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pids;
}

TEST(Subprocess, SplitAndQuote) {
  EXPECT_EQ(split_words("  ccache\tg++  -O1;  $(x)\n"),
            (std::vector<std::string>{"ccache", "g++", "-O1;", "$(x)"}));
  EXPECT_TRUE(split_words(" \t ").empty());
  EXPECT_EQ(quote_command({"g++", "-O3", "a b", "it's", "$(x)"}),
            "g++ -O3 'a b' 'it'\\''s' '$(x)'");
}

TEST(Subprocess, ArgumentsHaveNoShellMeaning) {
  TempDir d;
  const fs::path f = d.path / "F";
  const std::string touch = "touch " + f.string();
  auto r =
      run_subprocess({"echo", "-O1;", touch, "$(" + touch + ")", "`" + touch + "`", "|", "&&"}, 10);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.output, "-O1; " + touch + " $(" + touch + ") `" + touch + "` | &&\n");
  EXPECT_FALSE(fs::exists(f));
}

TEST(Subprocess, ExitCodeStderrAndNotFound) {
  TempDir d;
  write_script(d.path / "fail.sh", "echo out; echo 'fake failure message' >&2; exit 3\n");
  auto r = run_subprocess({(d.path / "fail.sh").string()}, 10);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.output.find("out\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fake failure message"), std::string::npos) << r.output;
  auto nf = run_subprocess({"no-such-program-coil-test"}, 10);
  EXPECT_TRUE(nf.not_found);
  EXPECT_NE(nf.exit_code, 0);
  // Runs in the folder asked for.
  auto pwd = run_subprocess({"pwd"}, 10, d.path.string());
  EXPECT_EQ(pwd.output, fs::canonical(d.path).string() + "\n");
}

TEST(Subprocess, TimeoutKillsTheWholeGroup) {
  TempDir d;
  const fs::path pids = d.path / "pids";
  // The script and a child it starts (same process group); both would run for 100 s.
  write_script(d.path / "hang.sh", "sleep 100 &\necho $$ $! > " + pids.string() + "\nwait\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_subprocess({(d.path / "hang.sh").string()}, 1.0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(s, 10.0);
  std::vector<pid_t> p = read_pids(pids);
  ASSERT_EQ(p.size(), 2u);
  // Gone and reaped (no zombies either) when run_subprocess returns.
  EXPECT_FALSE(alive(p[0])) << "script " << p[0];
  EXPECT_FALSE(alive(p[1])) << "its child " << p[1];
  EXPECT_FALSE(kill(-p[0], 0) == 0 || errno != ESRCH) << "process group " << p[0];
}

TEST(Subprocess, NothingOutlivesAParentKilledWithSigkill) {
  TempDir d;
  const fs::path pids = d.path / "pids";
  write_script(d.path / "hang.sh", "sleep 100 &\necho $$ $! > " + pids.string() + "\nwait\n");
  const pid_t coil = fork();
  if (coil == 0) {
    run_subprocess({(d.path / "hang.sh").string()}, 0);  // no time limit
    _exit(0);
  }
  ASSERT_GT(coil, 0);
  std::vector<pid_t> p = read_pids(pids);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(alive(p[0]));
  kill(coil, SIGKILL);
  int st;
  waitpid(coil, &st, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {  // the supervisor's SIGTERM, then SIGKILL: at once
    gone = !alive(p[0]) && !alive(p[1]);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "script " << p[0] << " or its child " << p[1] << " still there";
}

}  // namespace
