// Facts about the machine the engine sizes itself by.
#pragma once

namespace stoker {

/// CPUs this process may really use: its CPU affinity mask, capped by its cgroup's CPU quota
/// (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`; a quota rounds up to
/// whole CPUs). A container limited to 4 CPUs on a 64-core host gets 4, not 64. At least 1.
int UsableCpus();

}  // namespace stoker
