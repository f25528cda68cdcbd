// A small thread team for the kernels of a decoder step: the caller and up to
// MAX_HELPERS helper threads share a call's work items (matmul panels, attention heads).
//
// Why not OpenMP: a decoder step makes ~30 small kernel calls. With OMP_WAIT_POLICY=PASSIVE
// (which the app sets: an actively waiting team made decodes 6-10x slower whenever anything
// else ran) every parallel region wakes a sleeping thread, ~50 us on this VM, as long as the
// call itself; OpenMP's barrier then waits for that thread even if the caller could have
// done the whole call alone. Here:
// - items are claimed one at a time from a shared counter, and the caller claims too: a
//   helper that is slow to wake (or descheduled because another process holds the core)
//   takes fewer items instead of holding the call up; the caller waits only for items a
//   helper has actually started;
// - a helper spins for SPIN_US after its last item before it sleeps, so within a step (gaps
//   of 10-50 us between calls) it is awake, and between decodes it costs nothing;
// - a call made while another thread's call holds the team (two decodes at once) runs on
//   its caller alone instead of waiting.
#pragma once

namespace team {

using Task = void (*)(void* context, long item);

// Runs task(context, i) for i in 0..items-1 on the caller and up to threads-1 helpers.
// threads <= 1 runs every item on the caller, in order.
void run(long items, Task task, void* context, int threads);

}  // namespace team
