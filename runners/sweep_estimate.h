// `sweep FILE --pack K --estimate`: the projected time of the packed engine on the pending runs,
// from a few measured steps per shape, before anything is committed.
#pragma once
#include <vector>

#include "runners/scheduler.h"

namespace pb {

// Groups the jobs by shape (task, encoding, depth, width, heads, MLP ratio, batch, precision,
// device); for each shape trains min(K, its runs) copies side by side, as the packed engine
// would, for a few steps, and times one evaluation batch; prints runs, pack, packed step rate
// and projected time per shape, and the total (every run to its full steps: early stopping and
// the depth search can only shorten it). `slot_devices` are the packed engine's slots.
void print_estimate(const std::vector<Job>& jobs, const std::vector<int>& slot_devices);

}  // namespace pb
