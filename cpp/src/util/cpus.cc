#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "stoker/system.h"

namespace stoker {
namespace {

// The process's cgroup path for v2 ("0::/path") or for the v1 cpu controller.
std::string CgroupPath(bool v2) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (v2 && line.compare(0, first, "0") == 0 && controllers.empty()) return path;
    if (!v2) {
      std::stringstream names(controllers);
      std::string name;
      while (std::getline(names, name, ',')) {
        if (name == "cpu") return path;
      }
    }
  }
  return "";
}

// CPUs allowed by a quota over a period, rounded up; 0 when unlimited or unreadable.
int QuotaCpus(double quota, double period) {
  if (quota <= 0 || period <= 0) return 0;
  return std::max(1, static_cast<int>(std::ceil(quota / period)));
}

int CgroupCpus() {
  // cgroup v2: "max 100000" or "400000 100000", in the process's cgroup or at the root of a
  // container's namespace.
  for (const std::string& dir :
       {"/sys/fs/cgroup" + CgroupPath(true), std::string("/sys/fs/cgroup")}) {
    std::ifstream in(dir + "/cpu.max");
    std::string quota;
    double period = 0;
    if (in >> quota >> period) {
      if (quota == "max") return 0;
      return QuotaCpus(std::strtod(quota.c_str(), nullptr), period);
    }
  }
  for (const std::string& dir :
       {"/sys/fs/cgroup/cpu" + CgroupPath(false), std::string("/sys/fs/cgroup/cpu")}) {
    std::ifstream quota_in(dir + "/cpu.cfs_quota_us");
    std::ifstream period_in(dir + "/cpu.cfs_period_us");
    double quota = 0;
    double period = 0;
    if (quota_in >> quota && period_in >> period) return QuotaCpus(quota, period);
  }
  return 0;
}

}  // namespace

int UsableCpus() {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  const int quota = CgroupCpus();
  if (quota > 0) cpus = std::min(cpus, quota);
  return std::max(1, cpus);
}

}  // namespace stoker
